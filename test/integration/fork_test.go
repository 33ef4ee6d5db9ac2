package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
)

// counterProgram prints a counter in memory every 50 ms; a line "add N" on
// stdin adds N to it.
const counterProgram = `import sys, threading, time
n = 0
def read():
    global n
    for line in sys.stdin:
        n += int(line.split()[1])
threading.Thread(target=read, daemon=True).start()
while True:
    n += 1
    print(n, flush=True)
    time.sleep(0.05)
`

// lastCount is the last number the counter printed.
func (e *env) lastCount(org, id string, pid int) int {
	e.t.Helper()
	n, out, code := e.readCount(org, id, pid)
	if code != 200 || n < 0 {
		e.t.Fatalf("counter output of %s: %d %q", id, code, out)
	}
	return n
}

// readCount is the last number the counter printed (-1: none yet), its
// output and the answer's status.
func (e *env) readCount(org, id string, pid int) (int, string, int) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/sandbox/%s/processes/%d/output", e.http.URL, id, pid), nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[org])
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Stdout string }
	json.NewDecoder(res.Body).Decode(&out)
	lines := strings.Fields(out.Stdout)
	if len(lines) == 0 {
		return -1, out.Stdout, res.StatusCode
	}
	n, _ := strconv.Atoi(lines[len(lines)-1])
	return n, out.Stdout, res.StatusCode
}

// countedTo waits until the counter has printed n (its Python's start
// under gVisor takes from a fraction of a second to several on a busy
// host: a fixed sleep is not a count).
func (e *env) countedTo(org, id string, pid, n int) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := e.process(org, id, pid)
		if p.Status != "running" {
			e.t.Fatalf("the counter: %+v", p)
		}
		if got, _, _ := e.readCount(org, id, pid); got >= n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the counter did not reach %d in 30 s", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFork: a fork goes on from the original's memory — a Python
// process holding a counter keeps counting in both, independently — and
// from its files, which then diverge; it is listed, billed and reaped like
// any lease.
func TestFork(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		orig := e.lease("acme", map[string]any{"metadata": map[string]string{"role": "original"}})
		e.sh("acme", orig, "echo original > f; echo tmp > /tmp/t")
		counter := e.startProcess("acme", orig, map[string]any{"argv": []string{"python3", "-u", "-c", counterProgram}})
		e.countedTo("acme", orig, counter.Pid, 10)

		r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+orig+"/fork", "acme", map[string]any{"ttlSec": 120})
		fork, _ := r.JSON(t)["id"].(string)
		if fork == "" || fork == orig || r.JSON(t)["status"] != "running" {
			t.Fatalf("fork answer: %s", r.Body)
		}
		if md, _ := r.JSON(t)["metadata"].(map[string]any); md["role"] != "original" {
			t.Errorf("the fork's metadata: %v", r.JSON(t)["metadata"])
		}
		if !e.has(runtime.CapCheckpoint) {
			forkFilesOnly(t, e, orig, fork, r.JSON(t), counter.Pid)
			return
		}
		if r.JSON(t)["memoryKept"] != true {
			t.Errorf("a fork from memory: %s", r.Body)
		}
		// The counter runs in the fork, from where the original was.
		if p := e.process("acme", fork, counter.Pid); p.Status != "running" {
			t.Fatalf("the fork's counter: %+v", p)
		}
		atFork := e.lastCount("acme", fork, counter.Pid)
		if atFork < 5 {
			t.Errorf("the fork's counter starts at %d: it did not come from the original's memory", atFork)
		}
		// Independently: a jump of 100000 in the fork only.
		e.must(http.StatusOK, "POST", fmt.Sprintf("/v1/sandbox/%s/processes/%d/stdin", fork, counter.Pid), "acme", "add 100000\n")
		time.Sleep(400 * time.Millisecond)
		f, o := e.lastCount("acme", fork, counter.Pid), e.lastCount("acme", orig, counter.Pid)
		if f < 100000 || o >= 100000 || o <= atFork-5 {
			t.Errorf("counters after the jump: fork %d, original %d (forked at %d)", f, o, atFork)
		}
		time.Sleep(300 * time.Millisecond)
		if o2 := e.lastCount("acme", orig, counter.Pid); o2 <= o {
			t.Errorf("the original's counter stopped at %d", o)
		}
		// Files came along (workdir and /tmp, both in memory), then diverge.
		if got := e.sh("acme", fork, "cat f /tmp/t"); got != "original\ntmp\n" {
			t.Errorf("the fork's files: %q", got)
		}
		e.sh("acme", fork, "echo fork > f")
		if got := e.sh("acme", orig, "cat f"); got != "original\n" {
			t.Errorf("the original's file after the fork wrote its own: %q", got)
		}
		// Listed and billed like a lease.
		var list struct{ Sandboxes []map[string]any }
		json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).Body, &list)
		if len(list.Sandboxes) != 2 {
			t.Errorf("list: %d sandboxes", len(list.Sandboxes))
		}
		if u := string(e.must(http.StatusOK, "GET", "/v1/sandbox/usage", "acme", nil).Body); !strings.Contains(u, `"leases":2`) {
			t.Errorf("usage after a lease and a fork: %s", u)
		}
		// Another org cannot fork it.
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+orig+"/fork", "globex", nil)
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/"+orig+"/fork", "acme", map[string]any{"project": "p"})
		// Ending the original leaves the fork.
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+orig, "acme", nil)
		if p := e.process("acme", fork, counter.Pid); p.Status != "running" {
			t.Errorf("the fork's counter after the original ended: %+v", p)
		}
		// Reaped like any lease: expired, it ends.
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+fork+"/renew", "acme", map[string]any{"ttlSec": 1})
		time.Sleep(1500 * time.Millisecond)
		e.srv.Reaper.Once(t.Context())
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+fork, "acme", nil)
		if objs, err := e.srv.Runtime.List(t.Context(), nil); err != nil {
			t.Fatalf("listing: %v", err)
		} else if len(objs) != 0 {
			t.Errorf("containers left: %v", objs)
		}
	})
}

// TestForkProject: a project sandbox's fork needs a new project,
// which gets a copy of the volume; the two volumes then diverge.
func TestForkProject(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackendsWith(t, server.Config{}, []string{"dev"}, func(t *testing.T, e *env) {
		orig := e.lease("acme", map[string]any{"class": "dev", "project": "one"})
		e.sh("acme", orig, "mkdir -p src && echo v1 > src/a && head -c 1000000 /dev/urandom > blob && sha256sum blob > sum")
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/"+orig+"/fork", "acme", nil)
		e.lease("acme", map[string]any{"class": "exec", "project": "taken"})
		e.must(http.StatusConflict, "POST", "/v1/sandbox/"+orig+"/fork", "acme", map[string]any{"project": "taken"})
		r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+orig+"/fork", "acme", map[string]any{"project": "two"})
		fork, _ := r.JSON(t)["id"].(string)
		if r.JSON(t)["project"] != "two" || r.JSON(t)["class"] != "dev" {
			t.Fatalf("fork: %s", r.Body)
		}
		if got := e.sh("acme", fork, "cat src/a && sha256sum -c sum"); got != "v1\nblob: OK\n" {
			t.Errorf("the fork's volume: %q", got)
		}
		e.sh("acme", fork, "echo v2 > src/a")
		if got := e.sh("acme", orig, "cat src/a"); got != "v1\n" {
			t.Errorf("the original's volume after the fork wrote: %q", got)
		}
		var vols struct{ Volumes []map[string]any }
		json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/volumes", "acme", nil).Body, &vols)
		if len(vols.Volumes) != 3 {
			t.Errorf("volumes: %+v", vols)
		}
	})
}

// forkFilesOnly is the rest of TestFork where the backend copies no
// memory: the answer says so, the workdir's files came along (not /tmp,
// not the processes), the two diverge, and the fork is a lease like any
// other.
func forkFilesOnly(t *testing.T, e *env, orig, fork string, answer map[string]any, pid int) {
	t.Helper()
	if answer["memoryKept"] != false {
		t.Errorf("a fork of files only must say memoryKept false: %v", answer)
	}
	if got := e.sh("acme", fork, "cat f; ls /tmp/t 2>/dev/null || echo no-tmp"); got != "original\nno-tmp\n" {
		t.Errorf("the fork's files: %q", got)
	}
	e.must(http.StatusNotFound, "GET", fmt.Sprintf("/v1/sandbox/%s/processes/%d", fork, pid), "acme", nil)
	e.sh("acme", fork, "echo fork > f")
	if got := e.sh("acme", orig, "cat f"); got != "original\n" {
		t.Errorf("the original's file after the fork wrote its own: %q", got)
	}
	e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+orig+"/fork", "globex", nil)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+orig, "acme", nil)
	if got := e.sh("acme", fork, "cat f"); got != "fork\n" {
		t.Errorf("the fork after the original ended: %q", got)
	}
}
