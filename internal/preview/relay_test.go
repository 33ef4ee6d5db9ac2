package preview_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/relay"
	"github.com/sandboxd/sandbox/internal/relay/pool"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

type runner struct{}

func (runner) RunnerPath() string { return runtime.RunnerPath }

func org(name string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: name, Subject: "test"})
}

// echoRelay runs the relay's real end (internal/relay.Serve, which
// `sandbox-runner relay` runs inside) over the fake's exec: port 8080
// echoes, port 8081 never answers (its dial hangs), any other has nothing
// listening. It counts the relays started.
func echoRelay(started *atomic.Int32, hang chan struct{}) func(ctx context.Context, name string, req runtime.ExecRequest) error {
	return func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if len(req.Argv) != 2 || req.Argv[0] != runtime.RunnerPath || req.Argv[1] != "relay" {
			return &runtime.ExitError{Code: 127}
		}
		started.Add(1)
		served := make(chan error, 1)
		go func() {
			served <- relay.Serve(stdio{req.Stdin, req.Stdout}, relay.Targets{Port: func(port int) (net.Conn, error) {
				switch port {
				case 8080:
					a, b := net.Pipe()
					go func() { io.Copy(b, b); b.Close() }()
					return a, nil
				case 8081:
					<-hang
				}
				return nil, errors.New("connection refused")
			}})
		}()
		select {
		case err := <-served:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }

type env struct {
	svc *service.Service
	rt  *fake.Runtime
	pv  *preview.Previews
	sb  *sandbox.Sandbox
	// relays counts the relay execs started.
	relays *atomic.Int32
	pool   *pool.Pool
}

func newEnv(t *testing.T, r runtime.Runner) *env {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	svc := service.New(service.Config{StartTimeout: 5 * time.Second}, service.Deps{Store: st, Runtime: rt, Quotas: st, RuntimeName: "fake"})
	sb, err := svc.Lease(org("acme"), service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	relays, hang := new(atomic.Int32), make(chan struct{})
	t.Cleanup(func() { close(hang) })
	rt.SetExec(echoRelay(relays, hang))
	var p *pool.Pool
	if r != nil {
		p = pool.New(rt, r, svc)
		p.Linger = 50 * time.Millisecond
		t.Cleanup(p.Close)
	}
	pv := preview.NewPreviews(svc, preview.Relay{Pool: p, Backend: "fake"}, nil, preview.Config{}, false, nil, nil)
	return &env{svc: svc, rt: rt, pv: pv, sb: sb, relays: relays, pool: p}
}

// TestDialPort: a preview connection relays bytes both ways over the
// exec channel; it is work (the sandbox will not sleep under it, Stop ends
// it); a sleeping sandbox is woken for it; nothing listening is a 502, a
// relay that never connects a timeout, another org's sandbox not found, a
// port out of range invalid, and a backend without a runner the one 501.
func TestDialPort(t *testing.T) {
	e := newEnv(t, runner{})
	acme := org("acme")

	c, err := e.pv.DialPort(acme, e.sb.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	// A second connection rides on the same relay.
	c2, err := e.pv.DialPort(acme, e.sb.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if n := e.relays.Load(); n != 1 {
		t.Errorf("two connections started %d relays, want 1", n)
	}
	if _, err := e.svc.Sleep(acme, e.sb.ID); sandbox.KindOf(err) != sandbox.KindConflict {
		t.Errorf("sleep under a preview connection: %v, want 409", err)
	}
	res, err := e.svc.Stop(acme, e.sb.ID)
	if err != nil || res.Stopped != 1 {
		t.Fatalf("stop: %+v %v", res, err)
	}
	if _, err := c.Read(buf); err == nil {
		t.Error("the connection reads on after Stop")
	}
	c.Close()

	// A sleeping sandbox is woken by a dial, on a relay of its own; the
	// connection ends with Close. (The sleep closes the relay Stop left.)
	if _, err := e.svc.Sleep(acme, e.sb.ID); err != nil {
		t.Fatal(err)
	}
	before := e.relays.Load()
	c, err = e.pv.DialPort(acme, e.sb.ID, 8080)
	if err != nil {
		t.Fatalf("dial a sleeping sandbox: %v", err)
	}
	if sb, err := e.svc.Get(acme, e.sb.ID); err != nil || sb.Status != sandbox.StatusRunning {
		t.Errorf("after the dial: %+v %v", sb, err)
	}
	if n := e.relays.Load(); n != before+1 {
		t.Errorf("the woken sandbox's dial started %d relays, want 1", n-before)
	}
	c.Close()

	// A relay with no connection for its linger ends; the next dial
	// starts another.
	c, err = e.pv.DialPort(acme, e.sb.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(200 * time.Millisecond)
	before = e.relays.Load()
	c, err = e.pv.DialPort(acme, e.sb.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := e.relays.Load(); n != before+1 {
		t.Errorf("after the linger, a dial started %d relays, want 1", n-before)
	}

	if _, err := e.pv.DialPort(acme, e.sb.ID, 9); sandbox.KindOf(err) != sandbox.KindBadGateway || !strings.Contains(err.Error(), "nothing listens on port 9") || !errors.Is(err, preview.ErrNoListener) {
		t.Errorf("nothing listening: %v", err)
	}
	defer preview.SetRelayTimeout(50 * time.Millisecond)()
	if _, err := e.pv.DialPort(acme, e.sb.ID, 8081); sandbox.KindOf(err) != sandbox.KindTimeout {
		t.Errorf("a relay that never connects: %v", err)
	}
	if _, err := e.pv.DialPort(org("globex"), e.sb.ID, 8080); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("another org's sandbox: %v", err)
	}
	for _, port := range []int{0, 65536} {
		if _, err := e.pv.DialPort(acme, e.sb.ID, port); sandbox.KindOf(err) != sandbox.KindInvalid {
			t.Errorf("port %d: %v", port, err)
		}
	}
}

func TestDialPortWithoutRunner(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.pv.DialPort(org("acme"), e.sb.ID, 8080)
	if sandbox.KindOf(err) != sandbox.KindUnsupported || !strings.HasPrefix(err.Error(), "this server's fake backend cannot ") {
		t.Errorf("no runner: %v", err)
	}
}

// TestDialPortOldRunner: a sandbox whose runner predates the relay (it
// reads the hello as a bad program spec and exits) is reached by an exec
// of `sandbox-runner connect` per connection; the relay is not tried again
// for that container.
func TestDialPortOldRunner(t *testing.T) {
	e := newEnv(t, runner{})
	var relays, connects atomic.Int32
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		switch {
		case len(req.Argv) == 2 && req.Argv[1] == "relay":
			relays.Add(1)
			io.CopyN(io.Discard, req.Stdin, 16) // the hello, a bad spec
			return &runtime.ExitError{Code: 2}
		case len(req.Argv) == 3 && req.Argv[1] == "connect" && req.Argv[2] == "8080":
			connects.Add(1)
			req.Stdout.Write([]byte{0})
			copied := make(chan error, 1)
			go func() { _, err := io.Copy(req.Stdout, req.Stdin); copied <- err }()
			select {
			case err := <-copied:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		case len(req.Argv) == 3 && req.Argv[1] == "connect":
			return &runtime.ExitError{Code: 4}
		}
		return &runtime.ExitError{Code: 127}
	})
	for range 2 {
		c, err := e.pv.DialPort(org("acme"), e.sb.ID, 8080)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("ping"))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo over connect: %q %v", buf, err)
		}
		c.Close()
	}
	if relays.Load() != 1 || connects.Load() != 2 {
		t.Errorf("relays tried %d (want 1), connects %d (want 2)", relays.Load(), connects.Load())
	}
	if _, err := e.pv.DialPort(org("acme"), e.sb.ID, 9); !errors.Is(err, preview.ErrNoListener) || sandbox.KindOf(err) != sandbox.KindBadGateway {
		t.Errorf("nothing listening, over connect: %v", err)
	}
}
