package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestProcessOps: the background processes through both typed doors —
// POST /v1/sandbox/process_* and the MCP tools — on the real runtime:
// start, list, the output read whole and then since an offset (bytes as
// base64), stdin closed with eof, a signal by default TERM; bad input and
// another org's sandbox refused alike.
func TestProcessOps(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", nil)
	op := func(name string, body map[string]any) map[string]any {
		t.Helper()
		return e.must(http.StatusOK, "POST", "/v1/sandbox/"+name, "acme", body).JSON(t)
	}
	pidOf := func(p map[string]any) int {
		t.Helper()
		n, ok := p["pid"].(float64)
		if !ok || n <= 0 {
			t.Fatalf("no pid in %v", p)
		}
		return int(n)
	}

	// HTTP: cat echoes what it is sent; eof ends it.
	cat := pidOf(op("process_start", map[string]any{"id": id, "argv": []string{"cat"}, "stdin": "one\n"}))
	if w := op("process_stdin", map[string]any{"id": id, "pid": cat, "text": "two\n", "eof": true}); w["written"] != float64(4) {
		t.Errorf("process_stdin: %v", w)
	}
	if p := e.waitProcess("acme", id, cat); p.ExitCode == nil || *p.ExitCode != 0 {
		t.Errorf("cat after eof: %+v", p)
	}
	all := op("process_output", map[string]any{"id": id, "pid": cat})
	proc, _ := all["process"].(map[string]any)
	if all["stdout"] != "one\ntwo\n" || all["next"] != float64(8) || proc["status"] != "exited" {
		t.Errorf("process_output: %v", all)
	}
	if rest := op("process_output", map[string]any{"id": id, "pid": cat, "from": 4}); rest["stdout"] != "two\n" || rest["next"] != float64(8) {
		t.Errorf("process_output from 4: %v", rest)
	}
	bytesOut := pidOf(op("process_start", map[string]any{"id": id, "command": `printf '\377\000x'`}))
	e.waitProcess("acme", id, bytesOut)
	if b := op("process_output", map[string]any{"id": id, "pid": bytesOut}); b["stdout"] != "" || b["stdoutBase64"] != "/wB4" {
		t.Errorf("process_output of bytes: %v", b)
	}

	// A signal with none named is TERM.
	sleeper := pidOf(op("process_start", map[string]any{"id": id, "argv": []string{"sleep", "600"}}))
	op("process_signal", map[string]any{"id": id, "pid": sleeper})
	if p := e.waitProcess("acme", id, sleeper); p.Signal != "SIGTERM" || *p.ExitCode != 143 {
		t.Errorf("after process_signal: %+v", p)
	}
	list, _ := op("process_list", map[string]any{"id": id})["processes"].([]any)
	var pids []int
	for _, p := range list {
		pids = append(pids, int(p.(map[string]any)["pid"].(float64)))
	}
	if len(pids) != 3 || !slices.Contains(pids, cat) || !slices.Contains(pids, sleeper) {
		t.Errorf("process_list: %v", list)
	}

	for _, bad := range []struct {
		op     string
		body   map[string]any
		status int
	}{
		{"process_start", map[string]any{"id": id}, http.StatusBadRequest},
		{"process_start", map[string]any{"argv": []string{"true"}}, http.StatusBadRequest},
		{"process_output", map[string]any{"id": id}, http.StatusBadRequest},
		{"process_signal", map[string]any{"id": id, "pid": sleeper, "signal": "BOGUS"}, http.StatusBadRequest},
		{"process_signal", map[string]any{"id": id, "pid": 99999}, http.StatusNotFound},
		{"process_stdin", map[string]any{"id": id, "pid": cat, "text": "late"}, http.StatusConflict},
		{"process_list", map[string]any{"id": id, "org": "globex"}, http.StatusBadRequest},
	} {
		e.must(bad.status, "POST", "/v1/sandbox/"+bad.op, "acme", bad.body)
	}

	// MCP: the same operations as tools.
	ctx := context.Background()
	s, err := e.mcpSession(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	started, msg := call(t, s, "process_start", map[string]any{"id": id, "command": "echo from-mcp; read x; echo got-$x"})
	if msg != "" {
		t.Fatalf("process_start: %s", msg)
	}
	pid := pidOf(started)
	if w, msg := call(t, s, "process_stdin", map[string]any{"id": id, "pid": pid, "text": "y\n"}); w["written"] != float64(2) {
		t.Errorf("process_stdin: %v %s", w, msg)
	}
	var out map[string]any
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, msg = call(t, s, "process_output", map[string]any{"id": id, "pid": pid})
		if p, _ := out["process"].(map[string]any); p["status"] == "exited" {
			break
		}
	}
	if out["stdout"] != "from-mcp\ngot-y\n" {
		t.Errorf("process_output: %v %s", out, msg)
	}
	if l, msg := call(t, s, "process_list", map[string]any{"id": id}); !strings.Contains(mustJSON(l), fmt.Sprintf(`"pid":%d`, pid)) {
		t.Errorf("process_list: %v %s", l, msg)
	}
	if _, msg := call(t, s, "process_signal", map[string]any{"id": id, "pid": pid}); !strings.HasPrefix(msg, "conflict:") {
		t.Errorf("process_signal on an ended process: %q", msg)
	}
	if _, msg := call(t, s, "process_output", map[string]any{"id": id, "pid": 0}); !strings.HasPrefix(msg, "invalid:") {
		t.Errorf("process_output without a pid: %q", msg)
	}
}
