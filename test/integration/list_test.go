package integration_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sandboxd/sandbox/internal/server"
)

// TestListPages: keyset pages of the listing, newest first, with a cursor
// that only this server's own answers satisfy.
func TestListPages(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		var ids []string
		for range 3 {
			ids = append(ids, e.lease("acme", nil))
		}
		type page struct {
			Sandboxes []struct{ ID string }
			Next      string
		}
		get := func(q string) page {
			var p page
			json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox?"+q, "acme", nil).Body, &p)
			return p
		}
		p1 := get("limit=2")
		if len(p1.Sandboxes) != 2 || p1.Next == "" || p1.Sandboxes[0].ID != ids[2] || p1.Sandboxes[1].ID != ids[1] {
			t.Fatalf("first page %+v", p1)
		}
		p2 := get("limit=2&cursor=" + p1.Next)
		if len(p2.Sandboxes) != 1 || p2.Next != "" || p2.Sandboxes[0].ID != ids[0] {
			t.Fatalf("second page %+v", p2)
		}
		if all := get(""); len(all.Sandboxes) != 3 || all.Next != "" {
			t.Fatalf("default page %+v", all)
		}
		for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=nope", "cursor=" + p1.Next + "x"} {
			e.must(http.StatusBadRequest, "GET", "/v1/sandbox?"+q, "acme", nil)
		}
		// Another org's listing, with acme's cursor, shows nothing of acme's.
		var g page
		json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox?cursor="+p1.Next, "globex", nil).Body, &g)
		if len(g.Sandboxes) != 0 {
			t.Errorf("globex sees %+v", g)
		}
	})
}
