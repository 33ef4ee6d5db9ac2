package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/service"
)

// TestQuotaAndVolumesOnRunsc: on the real runtime, an org held to one
// project is refused a second (403, naming the quota) with nothing left
// behind; its volume lists with the live sandbox holding it, cannot be
// deleted while held, and once deleted is gone from disk and frees the
// quota; another org is not affected.
func TestQuotaAndVolumesOnRunsc(t *testing.T) {
	e := newEnv(t, "dev")
	one := 1
	if err := e.srv.Store.SetOrgQuota(context.Background(), "acme", quota.Policy{Projects: &one}); err != nil {
		t.Fatal(err)
	}
	id := e.lease("acme", map[string]any{"class": "dev", "project": "first"})
	e.sh("acme", id, "echo kept > note.txt")
	r := e.must(http.StatusForbidden, "POST", "/v1/sandbox", "acme", map[string]any{"class": "dev", "project": "second"})
	if !strings.Contains(string(r.Body), "quota projects exceeded: limit 1, in use 1") {
		t.Errorf("refusal %s", r.Body)
	}
	if list := e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).JSON(t)["sandboxes"].([]any); len(list) != 1 {
		t.Errorf("the refusal left a row: %d sandboxes", len(list))
	}
	e.lease("globex", map[string]any{"class": "dev", "project": "second"})

	vols := e.must(http.StatusOK, "GET", "/v1/volumes", "acme", nil).JSON(t)["volumes"].([]any)
	if len(vols) != 1 || vols[0].(map[string]any)["project"] != "first" || vols[0].(map[string]any)["liveSandbox"] != id {
		t.Fatalf("volumes %v", vols)
	}
	e.must(http.StatusConflict, "DELETE", "/v1/volumes/first", "acme", nil)
	onDisk := func() (n int) {
		entries, _ := os.ReadDir(filepath.Join(e.data, "runtime", "volumes"))
		for _, d := range entries {
			if strings.HasPrefix(d.Name(), projectClaim("acme", "first")) {
				n++
			}
		}
		return n
	}
	if onDisk() == 0 {
		t.Fatal("the project's volume is not on disk")
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	e.must(http.StatusOK, "DELETE", "/v1/volumes/first", "acme", nil)
	if n := onDisk(); n != 0 {
		t.Errorf("%d entries of the deleted volume left on disk", n)
	}
	fresh := e.lease("acme", map[string]any{"class": "dev", "project": "second"})
	if out := e.sh("acme", fresh, "ls"); out != "" {
		t.Errorf("a new project's volume is not empty: %q", out)
	}
}

// TestHostAdmissionOnRunsc: a server whose memory reserve the host cannot
// keep refuses every start with 503 and a retry hint, and starts nothing.
func TestHostAdmissionOnRunsc(t *testing.T) {
	e := newEnvConfig(t, server.Config{Service: service.Config{ReserveMemoryMiB: 1 << 30}})
	r := e.must(http.StatusServiceUnavailable, "POST", "/v1/sandbox", "acme", nil)
	if !strings.Contains(string(r.Body), "short of memory") || r.Header.Get("Retry-After") == "" {
		t.Errorf("refusal %d %s %v", r.Status, r.Body, r.Header)
	}
	if objs := mustList(t, e); len(objs) != 0 {
		t.Errorf("%d containers after a refused start", len(objs))
	}
}
