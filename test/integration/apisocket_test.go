package integration_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

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
