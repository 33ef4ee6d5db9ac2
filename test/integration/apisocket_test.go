package integration_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
)

// apiCall is a shell line calling this server from inside a sandbox, on
// its API socket, with its lease credential (curl: in the exec image).
func apiCall(path string, withToken bool) string {
	auth := ""
	if withToken {
		auth = `-H "Authorization: Bearer $(cat /run/sandbox/token)" `
	}
	return `curl -sS --unix-socket /run/sandbox/api.sock ` + auth + `-w '\n%{http_code}\n' http://sandbox.internal` + path
}

// TestAPISocket: code in a sandbox with no network calls this server with
// its lease credential on /run/sandbox/api.sock (the relay carries the
// call the other way over the exec channel): it reads its own lease and
// no other's; without the credential it is refused; the socket is the
// sandbox user's alone; a background process calls it too, past the
// relay's linger with no command in flight.
func TestAPISocket(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 300})
		other := e.lease("acme", map[string]any{"ttlSec": 300})

		out := e.sh("acme", id, apiCall("/v1/sandbox/"+id, true))
		trimmed := strings.TrimSpace(out)
		cut := strings.LastIndexByte(trimmed, '\n')
		body, code := trimmed[:max(cut, 0)], trimmed[cut+1:]
		var sb map[string]any
		if code != "200" || json.Unmarshal([]byte(body), &sb) != nil || sb["id"] != id {
			t.Fatalf("its own lease from inside: %q", out)
		}
		if out := e.sh("acme", id, apiCall("/v1/sandbox/"+other, true)); !strings.HasSuffix(out, "\n404\n") {
			t.Errorf("another sandbox's lease from inside: %q", out)
		}
		if out := e.sh("acme", id, apiCall("/v1/sandbox/"+id, false)); !strings.HasSuffix(out, "\n401\n") {
			t.Errorf("no credential: %q", out)
		}
		if out := e.sh("acme", id, "stat -c '%a %u' /run/sandbox/api.sock; id -u"); len(strings.Fields(out)) != 3 ||
			strings.Fields(out)[0] != "600" || strings.Fields(out)[1] != strings.Fields(out)[2] {
			t.Errorf("the socket (mode uid; id -u): %q", out)
		}
		// A background process calls long after the command that started
		// it has ended, with no command in flight since: the relay outlived
		// its linger (15 s) because the process ran.
		e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/processes", "acme", map[string]any{
			"command": "sleep 20; " + apiCall("/v1/sandbox/"+id, true) + " > /tmp/from-process 2>&1"})
		time.Sleep(23 * time.Second)
		deadline := time.Now().Add(15 * time.Second)
		for {
			out := e.sh("acme", id, "cat /tmp/from-process 2>/dev/null || true")
			if strings.HasSuffix(out, "\n200\n") && strings.Contains(out, id) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the background process's call: %q", out)
			}
			time.Sleep(time.Second)
		}
	})
}

// TestRelayInInit: a sandbox's relay (its API socket's way out, previews,
// the process daemon) costs no process where the backend can give init a
// way in: on gVisor the runner's init serves it from the start on a
// socket given as its stdin, so no `sandbox-runner relay` runs in the
// sandbox; on a cluster it is an exec. A sandbox that sleeps, or is
// forked, while its init holds that socket wakes (is made) from a
// checkpoint that has it, and is relayed by an exec after.
func TestRelayInInit(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		backend, _ := e.capabilities()
		// The runner's relay by its command line (this shell's own starts
		// with the shell).
		relays := func(id string) string {
			return strings.TrimSpace(e.sh("acme", id, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^`+runtime.RunnerPath+` relay' || true`))
		}
		answers := func(id, when string) {
			t.Helper()
			if out := e.sh("acme", id, apiCall("/v1/sandbox/"+id, true)); !strings.HasSuffix(out, "\n200\n") || !strings.Contains(out, id) {
				t.Errorf("%s: its lease from inside: %q", when, out)
			}
		}
		id := e.lease("acme", map[string]any{"ttlSec": 300})
		answers(id, "leased")
		want := "1"
		if backend == "gvisor" {
			want = "0"
		}
		if n := relays(id); n != want {
			t.Errorf("%s: %s relay processes run in a leased sandbox, want %s", backend, n, want)
		}
		if e.has(runtime.CapFork) {
			r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/fork", "acme", map[string]any{"ttlSec": 120})
			fork, _ := r.JSON(t)["id"].(string)
			answers(fork, "the fork")
			answers(id, "forked from")
		}
		if e.has(runtime.CapCheckpoint) {
			e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/sleep", "acme", nil)
			e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/wake", "acme", nil)
			answers(id, "woken")
			if n := relays(id); n != "1" {
				t.Errorf("%s: %s relay processes run in a woken sandbox, want the exec's 1", backend, n)
			}
		}
	})
}
