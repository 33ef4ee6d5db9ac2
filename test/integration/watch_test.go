package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/wire"
)

// TestWatchDir: a watch sees what the sandbox's own code does to its files
// (created, a burst of writes as one written, renamed, removed; in a
// subdirectory made after the watch began, with recursive), as server-sent
// events, on both backends.
func TestWatchDir(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.sh("acme", id, "mkdir -p out")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/sandbox/"+id+"/fs/watch?path=out&recursive=1", nil)
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("watch: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		events := make(chan wire.FileEvent, 64)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var ev wire.FileEvent
					json.Unmarshal([]byte(d), &ev)
					events <- ev
				}
			}
		}()
		if ev := <-events; ev.Type != "ready" || !strings.HasSuffix(ev.Name, "/out") {
			t.Fatalf("first event: %+v", ev)
		}
		e.sh("acme", id, "mkdir out/sub && sleep 0.3 && for i in 1 2 3 4 5; do echo $i >> out/sub/log.txt; done && mv out/sub/log.txt out/done.txt && rm out/done.txt")
		want := []string{"created sub", "created sub/log.txt", "written sub/log.txt", "renamed sub/log.txt", "created done.txt", "removed done.txt"}
		var got []string
		for len(got) < len(want) {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended after %v", got)
				}
				got = append(got, ev.Type+" "+ev.Name)
			case <-time.After(20 * time.Second):
				t.Fatalf("events %v, want %v", got, want)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("events %v, want %v", got, want)
		}

		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs/watch?path=nope", "acme", nil)
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs/watch", "globex", nil)
		e.must(http.StatusBadRequest, "GET", "/v1/sandbox/"+id+"/fs/watch?path=../../etc", "acme", nil)
	})
}
