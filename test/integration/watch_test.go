package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/wire"
)

// watchEvent is one event of a watch's stream and its id.
type watchEvent struct {
	id string
	wire.FileEvent
}

// watchStream opens a watch of out/ (recursive) in sandbox id, resuming
// after last when it is set, and answers its events as they come.
func watchStream(t *testing.T, ctx context.Context, e *env, id, last string) <-chan watchEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/sandbox/"+id+"/fs/watch?path=out&recursive=1", nil)
	req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		res.Body.Close()
		t.Fatalf("watch: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	events := make(chan watchEvent, 64)
	go func() {
		defer close(events)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev watchEvent
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
				ev.id = v
			}
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				json.Unmarshal([]byte(d), &ev.FileEvent)
				events <- ev
				ev = watchEvent{}
			}
		}
	}()
	return events
}

// nextEvents takes n events from events (20 s for each at most), as "type name".
func nextEvents(t *testing.T, events <-chan watchEvent, n int) (got []string, last string) {
	t.Helper()
	for len(got) < n {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended after %v", got)
			}
			got, last = append(got, strings.TrimSpace(ev.Type+" "+ev.Name)), ev.id
		case <-time.After(20 * time.Second):
			t.Fatalf("events %v, want %d", got, n)
		}
	}
	return got, last
}

// TestWatchDir: a watch sees what the sandbox's own code does to its files
// (created, a burst of writes as one written, renamed, removed; in a
// subdirectory made after the watch began, with recursive), as server-sent
// events, on both backends; a stream that resumes with the last id it had
// gets what changed while it was away.
func TestWatchDir(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.sh("acme", id, "mkdir -p out")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		first, stop := context.WithCancel(ctx)
		events := watchStream(t, first, e, id, "")
		if got, _ := nextEvents(t, events, 1); !strings.HasPrefix(got[0], "ready /") || !strings.HasSuffix(got[0], "/out") {
			t.Fatalf("first event: %v", got)
		}
		e.sh("acme", id, "mkdir out/sub && sleep 0.3 && for i in 1 2 3 4 5; do echo $i >> out/sub/log.txt; done && mv out/sub/log.txt out/done.txt && rm out/done.txt")
		want := []string{"created sub", "created sub/log.txt", "written sub/log.txt", "renamed sub/log.txt", "created done.txt", "removed done.txt"}
		got, last := nextEvents(t, events, len(want))
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("events %v, want %v", got, want)
		}

		// The stream drops; the sandbox goes on; the stream resumes after
		// the last id it had and is told what it missed, then lives on.
		stop()
		for range events {
		}
		e.sh("acme", id, "echo x > out/away.txt")
		events = watchStream(t, ctx, e, id, last)
		got, _ = nextEvents(t, events, 3)
		if want := "created away.txt,written away.txt"; !strings.HasPrefix(got[0], "ready /") || strings.Join(got[1:], ",") != want {
			t.Errorf("resumed: %v, want ready, then %s", got, want)
		}
		e.sh("acme", id, "rm out/away.txt")
		if got, _ := nextEvents(t, events, 1); got[0] != "removed away.txt" {
			t.Errorf("live after the resume: %v", got)
		}
		// A watch the server does not have (ended, or another server's):
		// begun anew, with overflow first.
		gone := watchStream(t, ctx, e, id, "AAAAAAAAAAAAAAAA.3")
		if got, _ := nextEvents(t, gone, 2); !strings.HasPrefix(got[0], "ready /") || got[1] != "overflow" {
			t.Errorf("resuming an unknown watch: %v", got)
		}

		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs/watch?path=nope", "acme", nil)
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs/watch", "globex", nil)
		e.must(http.StatusBadRequest, "GET", "/v1/sandbox/"+id+"/fs/watch?path=../../etc", "acme", nil)
		bad, _ := http.NewRequest("GET", e.http.URL+"/v1/sandbox/"+id+"/fs/watch?path=out", nil)
		bad.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		bad.Header.Set("Last-Event-ID", "not-an-id")
		if res, err := http.DefaultClient.Do(bad); err != nil || res.StatusCode != http.StatusBadRequest {
			t.Errorf("a made-up Last-Event-ID: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		// The streams go; their watches wait for them (watchGrace, 30 s)
		// but keep nothing awake: the sandbox sleeps as soon as the server
		// has seen the streams' connections close (which a request on
		// another connection can overtake by a moment: CI saw one 409
		// on a cluster), and the sleep ends the watches.
		cancel()
		for range events {
		}
		for range gone {
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r := e.do("POST", "/v1/sandbox/"+id+"/sleep", "acme", nil)
			if r.Status == http.StatusOK {
				break
			}
			if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "commands running") || time.Now().After(deadline) {
				t.Fatalf("sleep after the streams went: %d %s", r.Status, r.Body)
			}
		}
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	})
}

// TestWatchesWaitingAreBounded: streams opened and dropped one after the
// other leave at most a few watches waiting for their clients (each a
// process in the sandbox and events kept on the server), not one each. On
// both backends.
func TestWatchesWaitingAreBounded(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.sh("acme", id, "mkdir -p out")
		for range 10 {
			ctx, cancel := context.WithCancel(context.Background())
			events := watchStream(t, ctx, e, id, "")
			nextEvents(t, events, 1) // ready: the watch is in place
			cancel()
			for range events {
			}
		}
		var n int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out := e.sh("acme", id, "ps -eo args | grep -c '[ ]watch ' || true")
			n = 0
			fmt.Sscan(out, &n)
			if n <= 4 || time.Now().After(deadline) {
				break
			}
		}
		if n > 4 {
			t.Errorf("%d watches run in the sandbox after 10 dropped streams, want at most 4 waiting", n)
		}
	})
}
