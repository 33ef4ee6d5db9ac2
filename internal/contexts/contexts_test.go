package contexts

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/procwire"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// daemon is a process daemon that answers from a script: the contexts'
// logic (parsing, checks, refusals, default contexts) without a sandbox.
type daemon struct {
	ctxs    map[string]bool
	stream  string // a run's answer
	created []procwire.Request
}

func (d *daemon) Daemon(_ context.Context, _ string, req procwire.Request) (*procwire.Answer, error) {
	switch req.Op {
	case "ctxnew":
		d.created = append(d.created, req)
		if d.ctxs[req.Ctx] {
			a := &procwire.Answer{Boot: "b", Error: "the context exists"}
			return a, sandbox.Errorf(sandbox.KindInvalid, "%s", a.Error)
		}
		d.ctxs[req.Ctx] = true
		return &procwire.Answer{Boot: "b", Context: &procwire.Context{ID: req.Ctx, Kernel: req.Kernel, Dir: req.Dir, Started: 5000}}, nil
	}
	a := &procwire.Answer{Boot: "b", Error: "no such context"}
	return a, sandbox.Errorf(sandbox.KindInvalid, "%s", a.Error)
}

func (d *daemon) DaemonStream(_ context.Context, _ string, req procwire.Request, _ time.Duration, out io.Writer) error {
	if !d.ctxs[req.Ctx] {
		io.WriteString(out, `{"error": "no such context"}`+"\n")
		return nil
	}
	_, err := io.WriteString(out, d.stream)
	return err
}

type sandboxes struct{}

func (sandboxes) Get(context.Context, string) (*sandbox.Sandbox, error) {
	return &sandbox.Sandbox{ID: "sb_1", Workdir: "/mnt/data"}, nil
}

func lines(evs ...string) string { return strings.Join(evs, "\n") + "\n" }

func TestRunCollects(t *testing.T) {
	d := &daemon{ctxs: map[string]bool{"c": true}, stream: lines(
		`{"type": "stdout", "text": "hi\n"}`,
		`{"type": "result", "data": {"text/plain": "42", "image/png": "iVBOR", "application/x-evil": "no", "application/json": {"a": 1}, "text/html": ["<b>", "x</b>"]}, "isMainResult": true}`,
		`{"type": "error", "name": "ZeroDivisionError", "value": "division by zero", "traceback": ["a", "b"]}`,
		`{"type": "end", "executionCount": 3, "timedOut": true}`)}
	ex, err := New(d, sandboxes{}).Run(t.Context(), "sb_1", "c", wire.ContextRunRequest{Code: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(ex)
	got := strings.TrimSpace(b.String())
	want := `{"results":[{"data":{"application/json":{"a":1},"image/png":"iVBOR","text/html":"<b>x</b>","text/plain":"42"},"isMainResult":true}],"logs":{"stdout":["hi\n"],"stderr":[]},"error":{"name":"ZeroDivisionError","value":"division by zero","traceback":["a","b"]},"executionCount":3,"timedOut":true}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// A driver is hostile code's neighbour: what an honest one never says is a
// 502, never passed on.
func TestRunRefusesNonsense(t *testing.T) {
	for name, stream := range map[string]string{
		"not JSON":       lines(`{"type": "stdout"`, `{"type": "end"}`),
		"unknown type":   lines(`{"type": "exec", "text": "rm -rf /"}`, `{"type": "end"}`),
		"no end":         lines(`{"type": "stdout", "text": "x"}`),
		"after the end":  lines(`{"type": "end"}`, `{"type": "stdout", "text": "x"}`),
		"bad MIME value": lines(`{"type": "result", "data": {"text/plain": nul}}`, `{"type": "end"}`),
	} {
		d := &daemon{ctxs: map[string]bool{"c": true}, stream: stream}
		_, err := New(d, sandboxes{}).Run(t.Context(), "sb_1", "c", wire.ContextRunRequest{Code: "x"}, nil)
		if sandbox.KindOf(err) != sandbox.KindBadGateway {
			t.Errorf("%s: %v, want a 502", name, err)
		}
	}
}

func TestDefaultContextOnFirstUse(t *testing.T) {
	d := &daemon{ctxs: map[string]bool{}, stream: lines(`{"type": "end", "executionCount": 1}`)}
	c := New(d, sandboxes{})
	if _, err := c.Run(t.Context(), "sb_1", "python", wire.ContextRunRequest{Code: "1"}, nil); err != nil {
		t.Fatal(err)
	}
	if len(d.created) != 1 || d.created[0].Ctx != "python" || d.created[0].Kernel != "python3" || d.created[0].Dir != "/mnt/data" {
		t.Errorf("created: %+v", d.created)
	}
	// A context that is no language's name is not made up.
	if _, err := c.Run(t.Context(), "sb_1", "ctx_gone", wire.ContextRunRequest{Code: "1"}, nil); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("a missing context: %v", err)
	}
}

func TestCreateChecks(t *testing.T) {
	c := New(&daemon{ctxs: map[string]bool{}}, sandboxes{})
	for _, req := range []wire.ContextRequest{
		{Language: "cobol"},
		{Language: "python", Cwd: "../../etc"},
		{Language: "python", Env: map[string]string{"1BAD": "x"}},
	} {
		if _, err := c.Create(t.Context(), "sb_1", req); sandbox.KindOf(err) != sandbox.KindInvalid {
			t.Errorf("%+v: %v, want a 400", req, err)
		}
	}
	k, err := c.Create(t.Context(), "sb_1", wire.ContextRequest{Language: "R", Cwd: "sub"})
	if err != nil || k.Language != "r" || k.Cwd != "/mnt/data/sub" || k.CreatedAt != 5 || !strings.HasPrefix(k.ID, "ctx_") {
		t.Errorf("created %+v, %v", k, err)
	}
	if _, err := c.Run(t.Context(), "sb_1", "c", wire.ContextRunRequest{TimeoutSec: -1}, nil); sandbox.KindOf(err) != sandbox.KindInvalid {
		t.Errorf("a negative timeout: %v", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"type": "result", "data": {"text/plain": "1"}}` + "\n" + `{"type": "end"}` + "\n"))
	f.Add([]byte(`{"error": "no such context"}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &reader{emit: func(wire.ContextEvent) error { return nil }}
		r.Write(b)
		r.finish()
	})
}
