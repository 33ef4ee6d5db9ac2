package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// quotaUsed is what GET /v1/sandbox/quota says org uses of quota name.
func (e *env) quotaUsed(org, name string) float64 {
	e.t.Helper()
	var q struct{ Quotas []quota.Line }
	if err := json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/quota", org, nil).Body, &q); err != nil {
		e.t.Fatal(err)
	}
	for _, l := range q.Quotas {
		if l.Name == name {
			return l.Used
		}
	}
	e.t.Fatalf("no %s quota line in %+v", name, q.Quotas)
	return 0
}

// refused asserts a 429 that names the quota and says when to retry.
func refused(t *testing.T, r resp, msg string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || !strings.Contains(string(r.Body), msg) || r.Header.Get("Retry-After") == "" {
		t.Errorf("want a 429 naming %q with Retry-After: %d %s %v", msg, r.Status, r.Body, r.Header)
	}
}

// TestQuotaCPUAndMemoryOnRunsc: through the real server, with the quota
// set over the operator's route, a lease past the org's CPU or memory
// quota is a 429 naming it that starts nothing; what is reserved comes
// back when a sandbox ends or sleeps, and a wake is held to the quota too;
// another org is not affected.
func TestQuotaCPUAndMemoryOnRunsc(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusOK, "PUT", "/v1/orgs/acme/quota", "system", map[string]any{"cpus": 2})
	e.must(http.StatusOK, "PUT", "/v1/orgs/globex/quota", "system", map[string]any{"memoryMiB": 1536})

	// CPU: an exec sandbox reserves 1 CPU; the third is over 2.
	a := e.lease("acme", nil)
	b := e.lease("acme", nil)
	refused(t, e.do("POST", "/v1/sandbox", "acme", nil), "quota cpus exceeded: limit 2, in use 2, this needs 1 more")
	if n := len(mustList(t, e)); n != 2 {
		t.Errorf("%d containers after a refused lease, want 2", n)
	}
	// Memory: an exec sandbox reserves 1024 MiB; the second is over 1536.
	g := e.lease("globex", nil)
	refused(t, e.do("POST", "/v1/sandbox", "globex", nil), "quota memoryMiB exceeded: limit 1536, in use 1024, this needs 1024 more")
	if n := len(mustList(t, e)); n != 3 {
		t.Errorf("%d containers after a refused lease, want 3", n)
	}

	// A sleeping sandbox reserves nothing; its wake is checked again.
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+a+"/pause", "acme", nil)
	c := e.lease("acme", nil)
	refused(t, e.do("POST", "/v1/sandbox/"+a+"/resume", "acme", nil), "quota cpus exceeded")
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+a, "acme", nil).JSON(t); sb["status"] != "sleeping" {
		t.Errorf("a refused wake left the sandbox %v", sb["status"])
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+c, "acme", nil)
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+a+"/resume", "acme", nil)
	e.sh("acme", a, "true")
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+b, "acme", nil)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+g, "globex", nil)
	e.lease("globex", nil)
}

// TestQuotaCommandsOnRunsc: through the real server, an org's commands
// past its quota are refused (429 with a short retry) while the ones
// within it run in the sandbox; a file read is a command too, a renew is
// not; another org is not affected; once the commands end, the org runs
// again.
func TestQuotaCommandsOnRunsc(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusOK, "PUT", "/v1/orgs/acme/quota", "system", map[string]any{"commands": 2})
	id := e.lease("acme", nil)
	other := e.lease("globex", nil)
	e.sh("acme", id, "echo x > f")

	// Two commands that run until told to end: each waits for its own file.
	done := make(chan execAnswer, 2)
	for i := range 2 {
		go func() {
			// Not e.exec: it would Fatal off the test's goroutine.
			r := e.do("POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"command": fmt.Sprintf("echo started > /tmp/s%d; while [ ! -e /tmp/end ]; do sleep 0.1; done; echo ran %d", i, i)})
			var a execAnswer
			if r.Status != http.StatusOK || json.Unmarshal(r.Body, &a) != nil {
				a.ExitCode, a.Stderr = -1, fmt.Sprintf("%d %s", r.Status, r.Body)
			}
			done <- a
		}()
	}
	// Both hold their slots: the quota line says so.
	deadline := time.Now().Add(time.Minute)
	for e.quotaUsed("acme", quota.NameCommands) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the two commands never ran at once (commands used %v)", e.quotaUsed("acme", quota.NameCommands))
		}
		time.Sleep(100 * time.Millisecond)
	}
	refused(t, e.do("POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"argv": []string{"touch", "/tmp/end"}}), "quota commands exceeded: limit 2, in use 2")
	refused(t, e.do("GET", "/v1/sandbox/"+id+"/fs?path=f", "acme", nil), "quota commands exceeded")
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/renew", "acme", map[string]any{"ttlSec": 600})
	if out := e.sh("globex", other, "echo other"); out != "other\n" {
		t.Errorf("another org's exec: %q", out)
	}

	// A third slot, from the operator, lets a command in that ends the
	// two; their slots come back.
	e.must(http.StatusOK, "PUT", "/v1/orgs/acme/quota", "system", map[string]any{"commands": 3})
	e.sh("acme", id, "touch /tmp/end")
	for range 2 {
		if a := <-done; a.ExitCode != 0 || !strings.HasPrefix(a.Stdout, "ran ") {
			t.Errorf("a command within the quota: %+v", a)
		}
	}
	e.must(http.StatusOK, "PUT", "/v1/orgs/acme/quota", "system", map[string]any{"commands": 1})
	if out := e.sh("acme", id, "cat f"); out != "x\n" {
		t.Errorf("after the commands ended: %q", out)
	}
	if used := e.quotaUsed("acme", quota.NameCommands); used != 0 {
		t.Errorf("commands used after all ended: %v", used)
	}
}
