package ops_test

import (
	"context"
	"encoding/base64"
	"github.com/sandboxd/sandbox/internal/files"
	bg "github.com/sandboxd/sandbox/internal/processes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

// The service runs commands and background processes on goroutines: none
// may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is the typed ops over the real service, a real SQLite store in a
// temp dir and the fake runtime, as the API wires them (without an
// interpreter, images or previews).
type env struct {
	ops *ops.Ops
	svc *service.Service
	rt  *fake.Runtime
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	svc := service.New(service.Config{StartTimeout: 5 * time.Second, ExecTimeout: 5 * time.Second},
		service.Deps{Store: st, Runtime: rt, Quotas: st})
	return &env{ops: ops.New(files.Join(svc, files.New(svc, 0, 0)), bg.New(svc, st, rt, nil, nil, "fake", nil, nil), nil, nil), svc: svc, rt: rt}
}

func orgCtx(org string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org, Subject: "test"})
}

var acme, globex = orgCtx("acme"), orgCtx("globex")

// wantKind fails unless err is of kind k.
func wantKind(t *testing.T, err error, k sandbox.Kind) {
	t.Helper()
	if err == nil || sandbox.KindOf(err) != k {
		t.Fatalf("error %v (kind %v), want kind %v", err, sandbox.KindOf(err), k)
	}
}

func (e *env) lease(t *testing.T) *sandbox.Object {
	t.Helper()
	sb, err := e.ops.Lease(acme, ops.LeaseIn{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestLeaseRunEndRoundTrip(t *testing.T) {
	e := newEnv(t)
	// The program sees the argv the op built and answers on stdout and
	// stderr, with an exit code: a non-zero exit is a result, not an error.
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if strings.Join(req.Argv, " ") != "echo hi" {
			return nil // the service's own programs (none expected here)
		}
		io.WriteString(req.Stdout, "hi\n")
		io.WriteString(req.Stderr, "warn\n")
		return &runtime.ExitError{Code: 3}
	})
	sb := e.lease(t)
	if sb.ID == "" || sb.Org != "acme" || sandbox.Status(sb.Status) != sandbox.StatusRunning || sb.Kind != "sandbox" {
		t.Fatalf("leased %+v", sb)
	}
	if len(e.rt.Objects()) != 1 {
		t.Fatalf("runtime objects %v, want the one leased", e.rt.Objects())
	}

	// Lease with the id is the typed get: the same sandbox, extended.
	got, err := e.ops.Lease(acme, ops.LeaseIn{ID: sb.ID, LeaseRequest: service.LeaseRequest{TTLSec: 600}})
	if err != nil {
		t.Fatal(err)
	}
	// The lease now ends ttlSec from now (not the class's default 900 s).
	if d := got.ExpiresAt - time.Now().Unix(); got.ID != sb.ID || d < 598 || d > 601 {
		t.Fatalf("renewed %+v (expires in %d s, want 600), was %+v", got, d, sb)
	}

	res, err := e.ops.Run(acme, ops.RunIn{ID: sb.ID, ExecRequest: service.ExecRequest{Argv: []string{"echo", "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stdout != "hi\n" || res.Stderr != "warn\n" {
		t.Fatalf("run %+v", res)
	}

	end, err := e.ops.End(acme, ops.EndIn{ID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !end.Ended || end.ID != sb.ID {
		t.Fatalf("end %+v", end)
	}
	if objs := e.rt.Objects(); len(objs) != 0 {
		t.Fatalf("runtime objects after end: %v", objs)
	}
	_, err = e.ops.Run(acme, ops.RunIn{ID: sb.ID, ExecRequest: service.ExecRequest{Command: "true"}})
	wantKind(t, err, sandbox.KindNotFound)
}

func TestWriteSendsDecodedBytes(t *testing.T) {
	e := newEnv(t)
	// Record what every program got on stdin: a write's body is the one
	// that carries the file.
	var mu sync.Mutex
	var stdins []string
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if req.Stdin != nil {
			b, _ := io.ReadAll(req.Stdin)
			mu.Lock()
			stdins = append(stdins, string(b))
			mu.Unlock()
		}
		return nil
	})
	sb := e.lease(t)
	for _, tc := range []struct {
		name string
		in   ops.WriteIn
		want string
	}{
		{"text", ops.WriteIn{Data: ptr("hello text")}, "hello text"},
		{"base64", ops.WriteIn{DataBase64: base64.StdEncoding.EncodeToString([]byte{0, 1, 0xff, 'x'})}, "\x00\x01\xffx"},
	} {
		mu.Lock()
		stdins = nil
		mu.Unlock()
		tc.in.ID, tc.in.Path = sb.ID, "f.bin"
		w, err := e.ops.Write(acme, tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if w.Bytes != int64(len(tc.want)) {
			t.Fatalf("%s: wrote %d bytes, want %d", tc.name, w.Bytes, len(tc.want))
		}
		mu.Lock()
		found := false
		for _, s := range stdins {
			found = found || s == tc.want
		}
		mu.Unlock()
		if !found {
			t.Fatalf("%s: no program got %q on stdin (got %q)", tc.name, tc.want, stdins)
		}
	}
}

func ptr(s string) *string { return &s }

func TestValidation(t *testing.T) {
	e := newEnv(t)
	sb := e.lease(t)
	// Every op on a sandbox needs its id; a process op also its pid. These
	// are refused before the service is asked.
	for name, call := range map[string]func() error{
		"fork":   func() error { _, err := e.ops.Fork(acme, ops.ForkIn{}); return err },
		"run":    func() error { _, err := e.ops.Run(acme, ops.RunIn{}); return err },
		"read":   func() error { _, err := e.ops.Read(acme, ops.PathIn{}); return err },
		"write":  func() error { _, err := e.ops.Write(acme, ops.WriteIn{Data: ptr("x")}); return err },
		"stop":   func() error { _, err := e.ops.Stop(acme, ops.IDIn{}); return err },
		"end":    func() error { _, err := e.ops.End(acme, ops.EndIn{}); return err },
		"start":  func() error { _, err := e.ops.ProcessStart(acme, ops.ProcessStartIn{}); return err },
		"list":   func() error { _, err := e.ops.ProcessList(acme, ops.IDIn{}); return err },
		"output": func() error { _, err := e.ops.ProcessOutput(acme, ops.OutputIn{Pid: 1}); return err },
		"nopid":  func() error { _, err := e.ops.ProcessOutput(acme, ops.OutputIn{ID: sb.ID}); return err },
		"stdin":  func() error { _, err := e.ops.ProcessStdin(acme, ops.StdinIn{ID: sb.ID, Pid: -1}); return err },
		"signal": func() error { _, err := e.ops.ProcessSignal(acme, ops.SignalIn{ID: sb.ID}); return err },
		"both data": func() error {
			_, err := e.ops.Write(acme, ops.WriteIn{ID: sb.ID, Path: "f", Data: ptr("x"), DataBase64: "eA=="})
			return err
		},
		"bad base64": func() error {
			_, err := e.ops.Write(acme, ops.WriteIn{ID: sb.ID, Path: "f", DataBase64: "not base64!"})
			return err
		},
		"renew with class": func() error {
			_, err := e.ops.Lease(acme, ops.LeaseIn{ID: sb.ID, LeaseRequest: service.LeaseRequest{Class: "dev"}})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) { wantKind(t, call(), sandbox.KindInvalid) })
	}
}

func TestOtherOrgIsNotFound(t *testing.T) {
	e := newEnv(t)
	sb := e.lease(t)
	// globex names acme's sandbox: the answer is that of an unknown id, for
	// every op, and acme's sandbox is untouched.
	for name, call := range map[string]func(ctx context.Context, id string) error{
		"renew": func(ctx context.Context, id string) error {
			_, err := e.ops.Lease(ctx, ops.LeaseIn{ID: id})
			return err
		},
		"run": func(ctx context.Context, id string) error {
			_, err := e.ops.Run(ctx, ops.RunIn{ID: id, ExecRequest: service.ExecRequest{Command: "true"}})
			return err
		},
		"read": func(ctx context.Context, id string) error {
			_, err := e.ops.Read(ctx, ops.PathIn{ID: id, Path: "f"})
			return err
		},
		"write": func(ctx context.Context, id string) error {
			_, err := e.ops.Write(ctx, ops.WriteIn{ID: id, Path: "f", Data: ptr("x")})
			return err
		},
		"stop": func(ctx context.Context, id string) error { _, err := e.ops.Stop(ctx, ops.IDIn{ID: id}); return err },
		"end":  func(ctx context.Context, id string) error { _, err := e.ops.End(ctx, ops.EndIn{ID: id}); return err },
	} {
		t.Run(name, func(t *testing.T) {
			wantKind(t, call(globex, sb.ID), sandbox.KindNotFound)
			wantKind(t, call(globex, "sb-unknown"), sandbox.KindNotFound)
		})
	}
	if _, err := e.ops.Run(acme, ops.RunIn{ID: sb.ID, ExecRequest: service.ExecRequest{Command: "true"}}); err != nil {
		t.Fatalf("acme's sandbox after globex's tries: %v", err)
	}
}

func TestMissingDependenciesAreUnsupported(t *testing.T) {
	e := newEnv(t)
	sb := e.lease(t)
	// No processes, no images, no previews: each op says this server does
	// not do it, even before looking at its input.
	bare := ops.New(files.Join(e.svc, files.New(e.svc, 0, 0)), nil, nil, nil)
	for name, call := range map[string]func() error{
		"process_start": func() error {
			_, err := bare.ProcessStart(acme, ops.ProcessStartIn{ID: sb.ID, ProcessRequest: bg.ProcessRequest{Command: "sleep 1"}})
			return err
		},
		"process_list":   func() error { _, err := bare.ProcessList(acme, ops.IDIn{ID: sb.ID}); return err },
		"process_output": func() error { _, err := bare.ProcessOutput(acme, ops.OutputIn{ID: sb.ID, Pid: 1}); return err },
		"process_stdin":  func() error { _, err := bare.ProcessStdin(acme, ops.StdinIn{ID: sb.ID, Pid: 1}); return err },
		"process_signal": func() error { _, err := bare.ProcessSignal(acme, ops.SignalIn{ID: sb.ID, Pid: 1}); return err },
		"no id process":  func() error { _, err := bare.ProcessList(acme, ops.IDIn{}); return err },
		"snapshot":       func() error { _, err := bare.Snapshot(acme, ops.SnapshotIn{ID: sb.ID}); return err },
		"images":         func() error { _, err := bare.ListImages(acme, ops.ImagesIn{}); return err },
		"preview_link":   func() error { _, err := bare.PreviewLink(acme, ops.PreviewLinkIn{ID: sb.ID, Port: 8080}); return err },
	} {
		t.Run(name, func(t *testing.T) { wantKind(t, call(), sandbox.KindUnsupported) })
	}
}

// procs is a fake Processes: the fake runtime has no in-sandbox runner, so
// the service answers no process op; what is tested here is the ops' own
// work on the way (the default signal, the output's assembly).
type procs struct {
	processes // nil: an op not faked here panics
	sig       string
	events    []bg.OutputEvent
}

// processes embeds as a field not named Processes (which is a method).
type processes = ops.Processes

func (p *procs) SignalProcess(_ context.Context, id string, pid int, sig string) (*bg.Process, error) {
	p.sig = sig
	return &bg.Process{Pid: pid, Status: "exited"}, nil
}

func (p *procs) ProcessOutput(_ context.Context, id string, pid int, from int64, follow bool, emit func(bg.OutputEvent) error) error {
	if follow {
		return sandbox.Errorf(sandbox.KindInvalid, "the typed op must not follow")
	}
	for _, ev := range p.events {
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}

func TestProcessSignalDefaultsToTERM(t *testing.T) {
	e := newEnv(t)
	p := &procs{}
	o := ops.New(files.Join(e.svc, files.New(e.svc, 0, 0)), p, nil, nil)
	if _, err := o.ProcessSignal(acme, ops.SignalIn{ID: "sb", Pid: 7}); err != nil {
		t.Fatal(err)
	}
	if p.sig != "TERM" {
		t.Fatalf("signal %q, want TERM", p.sig)
	}
	if _, err := o.ProcessSignal(acme, ops.SignalIn{ID: "sb", Pid: 7, Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	if p.sig != "KILL" {
		t.Fatalf("signal %q, want KILL", p.sig)
	}
}

func TestProcessOutputAssembly(t *testing.T) {
	e := newEnv(t)
	end := &bg.Process{Pid: 7, Status: "exited"}
	p := &procs{events: []bg.OutputEvent{
		{Kind: "dropped", Bytes: 5, Offset: -1},
		{Kind: "stdout", Data: []byte("he"), Offset: 7},
		{Kind: "stderr", Data: []byte{0xff, 0xfe}, Offset: 9},
		{Kind: "stdout", Data: []byte("llo"), Offset: 12},
		{Kind: "end", Process: end, Offset: -1},
	}}
	out, err := ops.New(files.Join(e.svc, files.New(e.svc, 0, 0)), p, nil, nil).ProcessOutput(acme, ops.OutputIn{ID: "sb", Pid: 7, From: 0})
	if err != nil {
		t.Fatal(err)
	}
	// Text stays text; bytes that are not UTF-8 go as base64 only; next is
	// the last offset seen; dropped bytes add up; the end names the process.
	if out.Stdout != "hello" || out.StdoutBase64 != "" ||
		out.Stderr != "" || out.StderrBase64 != base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe}) ||
		out.Next != 12 || out.DroppedBytes != 5 || out.Process != end {
		t.Fatalf("output %+v", out)
	}
}
