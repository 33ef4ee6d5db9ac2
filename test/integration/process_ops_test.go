package integration_test

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

// TestForkOps: fork through both typed doors on the real runtime — the
// fork has the original's files and its running process (which goes on
// in the fork: it answers its stdin there), the original runs on; a
// project on a sandbox that has none is refused.
func TestForkOps(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", nil)
	e.must(http.StatusOK, "POST", "/v1/sandbox/write", "acme", map[string]any{"id": id, "path": "before.txt", "data": "kept"})
	cat := e.startProcess("acme", id, map[string]any{"argv": []string{"cat"}, "stdin": "in-original\n"})

	fork := e.must(http.StatusOK, "POST", "/v1/sandbox/fork", "acme", map[string]any{"id": id, "metadata": map[string]string{"copy": "1"}}).JSON(t)
	fid, _ := fork["id"].(string)
	if fid == "" || fid == id || fork["status"] != "running" || fork["kind"] != "sandbox" || mustJSON(fork["metadata"]) != `{"copy":"1"}` {
		t.Fatalf("typed fork: %v", fork)
	}
	if r := e.must(http.StatusOK, "POST", "/v1/sandbox/read", "acme", map[string]any{"id": fid, "path": "before.txt"}).JSON(t); r["data"] != "kept" {
		t.Errorf("the fork's file: %v", r)
	}
	e.must(http.StatusOK, "POST", "/v1/sandbox/process_stdin", "acme", map[string]any{"id": fid, "pid": cat.Pid, "text": "in-fork\n", "eof": true})
	e.waitProcess("acme", fid, cat.Pid)
	if out := e.must(http.StatusOK, "POST", "/v1/sandbox/process_output", "acme", map[string]any{"id": fid, "pid": cat.Pid}).JSON(t); out["stdout"] != "in-original\nin-fork\n" {
		t.Errorf("the forked cat's output: %v", out)
	}
	if p := e.process("acme", id, cat.Pid); p.Status != "running" {
		t.Errorf("the original's cat after the fork's ended: %+v", p)
	}
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox/fork", "acme", map[string]any{"id": id, "project": "p"})
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox/fork", "acme", map[string]any{})

	s, err := e.mcpSession(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	again, msg := call(t, s, "fork", map[string]any{"id": fid})
	if gid, _ := again["id"].(string); gid == "" || gid == fid || gid == id {
		t.Fatalf("fork over MCP: %v %s", again, msg)
	}
	if r, msg := call(t, s, "read", map[string]any{"id": again["id"], "path": "before.txt"}); r["data"] != "kept" {
		t.Errorf("the second fork's file: %v %s", r, msg)
	}
	if _, msg := call(t, s, "fork", map[string]any{"id": id, "project": "p"}); !strings.HasPrefix(msg, "invalid:") {
		t.Errorf("fork with a project of a sandbox without one: %q", msg)
	}
}
