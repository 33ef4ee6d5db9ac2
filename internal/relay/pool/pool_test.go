package pool

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/relay"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// These are unit tests of the pool's own logic (holds, the linger, the
// API socket's lifetime) over an in-process runner end; the real relay,
// over runsc and over pods, is test/integration's TestAPISocket.

// inProcess is an Execer whose `relay` runs relay.Serve in this process,
// with the API socket at sock.
type inProcess struct {
	sock   string
	starts atomic.Int32
	// die, when closed, ends a running relay by itself, with last words
	// on its stderr (as a runner that crashed would).
	die chan struct{}
}

func (x *inProcess) Exec(ctx context.Context, name string, req runtime.ExecRequest) error {
	x.starts.Add(1)
	rw := struct {
		io.Reader
		io.Writer
		io.Closer
	}{req.Stdin, req.Stdout, io.NopCloser(nil)}
	done := make(chan error, 1)
	go func() {
		done <- relay.Serve(rw, relay.Targets{Inward: func() (net.Listener, error) { return net.Listen("unix", x.sock) }})
	}()
	select {
	case err := <-done:
		return err
	case <-x.die: // nil: never
		req.Stdin.(io.Closer).Close()
		req.Stdout.(io.Closer).Close()
		<-done
		io.WriteString(req.Stderr, "sandbox-runner relay: boom\n")
		return errors.New("exit status 1")
	case <-ctx.Done():
		if c, ok := req.Stdin.(io.Closer); ok {
			c.Close()
		}
		if c, ok := req.Stdout.(io.Closer); ok {
			c.Close()
		}
		<-done
		return ctx.Err()
	}
}

type runner struct{}

func (runner) RunnerPath() string { return "/sandbox-runner" }

type channels struct{}

func (channels) Channel(*sandbox.Sandbox) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	return ctx, cancel
}

// get calls the API socket and says whether it answered.
func get(sock string) bool {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	res, err := c.Get("http://sandbox.internal/ping")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusTeapot
}

// TestHoldAndLinger: a hold starts the relay and waits for the API socket;
// the socket answers with the pool's API; it stays while held and for the
// linger, and goes after; a busy sandbox keeps it past the linger.
func TestHoldAndLinger(t *testing.T) {
	defer goleak.VerifyNone(t)
	x := &inProcess{sock: filepath.Join(t.TempDir(), "api.sock")}
	p := New(x, runner{}, channels{})
	p.Linger = 300 * time.Millisecond
	p.API = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	var busy atomic.Bool
	p.Busy = func(context.Context, *sandbox.Sandbox) bool { return busy.Load() }
	defer p.Close()
	sb := &sandbox.Sandbox{ID: "sb_1", Name: "c1"}

	release := p.Hold(context.Background(), sb)
	if !get(x.sock) {
		t.Fatal("the API socket did not answer under a hold")
	}
	time.Sleep(2 * p.Linger)
	if !get(x.sock) {
		t.Fatal("the socket went while held")
	}
	release()
	release() // twice is once
	// A second hold while the relay lives starts nothing.
	p.Hold(context.Background(), sb)()
	if n := x.starts.Load(); n != 1 {
		t.Errorf("%d relays started, want 1", n)
	}
	waitGone(t, x.sock, 3*p.Linger)

	// Busy: past the linger while a background process runs.
	busy.Store(true)
	p.Hold(context.Background(), sb)()
	time.Sleep(3 * p.Linger)
	if !get(x.sock) {
		t.Fatal("the socket went while the sandbox was busy")
	}
	busy.Store(false)
	waitGone(t, x.sock, 3*p.Linger)
}

// TestNoAPI: without an API to serve, a hold starts nothing.
func TestNoAPI(t *testing.T) {
	x := &inProcess{sock: filepath.Join(t.TempDir(), "api.sock")}
	p := New(x, runner{}, channels{})
	defer p.Close()
	p.Hold(context.Background(), &sandbox.Sandbox{ID: "sb_1", Name: "c1"})()
	if x.starts.Load() != 0 {
		t.Error("a hold with no API started a relay")
	}
}

// waitGone waits for the socket to go (by its file: a call would hold
// the relay open).
func waitGone(t *testing.T, sock string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within + 2*time.Second)
	for {
		if _, err := os.Stat(sock); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the socket outlived the linger")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRelayEndedByItself: a relay that ends on its own (its runner died)
// is logged with its last words; one ended by its linger is not.
func TestRelayEndedByItself(t *testing.T) {
	defer goleak.VerifyNone(t)
	x := &inProcess{sock: filepath.Join(t.TempDir(), "api.sock"), die: make(chan struct{})}
	p := New(x, runner{}, channels{})
	p.Linger = 200 * time.Millisecond
	p.API = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	logs := capture.New(1 << 16) // written from the pool's goroutines
	p.Log = slog.New(slog.NewTextHandler(logs, nil))
	defer p.Close()
	sb := &sandbox.Sandbox{ID: "sb_1", Name: "c1"}

	p.Hold(context.Background(), sb)()
	waitGone(t, x.sock, 3*p.Linger)
	time.Sleep(50 * time.Millisecond)
	if strings.Contains(logs.String(), "ended by itself") {
		t.Fatalf("a relay ended by its linger was logged: %s", logs.String())
	}

	release := p.Hold(context.Background(), sb)
	defer release()
	close(x.die)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "ended by itself") {
		if time.Now().After(deadline) {
			t.Fatalf("a relay that died was not logged: %q", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "boom") || !strings.Contains(l, "sb_1") {
		t.Errorf("the log line lacks the runner's words or the sandbox: %s", l)
	}
}

// forwarder is a backend's port forward that answers err, else one end of
// a pipe.
type forwarder struct{ err error }

func (f forwarder) ForwardPort(context.Context, string, int) (net.Conn, error) {
	if f.err != nil {
		return nil, f.err
	}
	c, _ := net.Pipe()
	return c, nil
}

// TestConnectForwardsFirst: the backend's forward is tried first — its
// connection taken with no relay started, its "nothing listens" answered
// as the relay's would be — and a sandbox it cannot forward to goes
// through the relay.
func TestConnectForwardsFirst(t *testing.T) {
	x := &inProcess{sock: filepath.Join(t.TempDir(), "api.sock")}
	p := New(x, runner{}, channels{})
	defer p.Close()
	var paths []string
	p.Count = func(path string) { paths = append(paths, path) }
	sb := &sandbox.Sandbox{ID: "sb-1", Name: "sbx-1", UID: "u1"}
	ctx := context.Background()

	p.Forward = forwarder{}
	c, err := p.Connect(ctx, sb, 8000)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	p.Forward = forwarder{err: runtime.ErrRefused}
	if _, err := p.Connect(ctx, sb, 8000); !errors.Is(err, relay.ErrNoListener) {
		t.Fatalf("nothing listening, forwarded: %v", err)
	}
	if n := x.starts.Load(); n != 0 || !slices.Equal(paths, []string{"forward"}) {
		t.Fatalf("forwarded connections started %d relays, counted %v", n, paths)
	}
	p.Forward = forwarder{err: runtime.ErrNoForward}
	p.Connect(ctx, sb, 8000) // the in-process relay has no ports: its answer is not the point
	if n := x.starts.Load(); n != 1 {
		t.Fatalf("a sandbox with no forward started %d relays", n)
	}
}

// stoppedRunner answers the hello, floods the session with pings, and
// then answers nothing and never exits: a relay the sandbox's own code
// stopped (SIGSTOP) after writing to its pipe.
type stoppedRunner struct{ ended chan struct{} }

func (x *stoppedRunner) Exec(ctx context.Context, _ string, req runtime.ExecRequest) error {
	const hello = "sandbox-relay 1\n"
	io.ReadFull(req.Stdin, make([]byte, len(hello)))
	io.WriteString(req.Stdout, hello)
	ping := make([]byte, 12)
	ping[1], ping[3] = 2, 1 // a ping request
	// A write the server no longer reads blocks, as a pipe's.
	go func() {
		for range 1000 {
			if _, err := req.Stdout.Write(ping); err != nil {
				return
			}
		}
	}()
	<-ctx.Done() // only the exec's end ends it
	req.Stdout.(io.Closer).Close()
	close(x.ended)
	return ctx.Err()
}

// TestSessionEndEndsExec: a relay whose session ended while its exec runs
// on (here: the session's guard ended it) has its exec ended too, at once
// and not at the sandbox's end: each stopped relay would keep one.
func TestSessionEndEndsExec(t *testing.T) {
	x := &stoppedRunner{ended: make(chan struct{})}
	p := New(x, runner{}, channels{})
	p.API = http.NotFoundHandler()
	defer p.Close()
	p.Hold(context.Background(), &sandbox.Sandbox{ID: "sb_1", Name: "c1"})()
	select {
	case <-x.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec of a relay whose session ended still runs")
	}
}

// initLinks is InitLinks with one sandbox's init relay, served in this
// process over a socket pair (as the runner's init serves it).
type initLinks struct {
	mu     sync.Mutex
	name   string
	path   string   // its API socket
	server net.Conn // the pool's end, until taken
	done   chan error
}

func newInitLinks(name, sock string) *initLinks {
	ours, theirs := net.Pipe()
	l := &initLinks{name: name, path: sock, server: ours, done: make(chan error, 1)}
	go func() {
		l.done <- relay.Serve(theirs, relay.Targets{Inward: func() (net.Listener, error) { return net.Listen("unix", sock) }}, relay.Quiet)
		theirs.Close()
	}()
	return l
}

func (l *initLinks) sock() string { return l.path }

func (l *initLinks) TakeInitLink(name string) (net.Conn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name != l.name || l.server == nil {
		return nil, false
	}
	c := l.server
	l.server = nil
	return c, true
}

// TestInitLink: a sandbox whose init serves the relay is relayed on it —
// no exec — and kept past the linger, its API socket with it; the
// sandbox's channel ending ends it, and the next use is an exec's.
func TestInitLink(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	x := &inProcess{sock: filepath.Join(dir, "exec.sock")}
	init := newInitLinks("c1", filepath.Join(dir, "init.sock"))
	p := New(x, runner{}, channels{})
	p.Init = init
	p.Linger = 100 * time.Millisecond
	p.API = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	defer p.Close()
	sb := &sandbox.Sandbox{ID: "sb_1", Name: "c1"}

	p.Hold(context.Background(), sb)()
	if !get(init.sock()) {
		t.Fatal("init's API socket did not answer")
	}
	time.Sleep(5 * p.Linger)
	if !get(init.sock()) {
		t.Fatal("init's relay went with the linger")
	}
	if n := x.starts.Load(); n != 0 {
		t.Fatalf("%d relay execs started beside init's", n)
	}
	p.End(sb) // its channel's end (a sleep, a stop)
	select {
	case <-init.done:
	case <-time.After(5 * time.Second):
		t.Fatal("init's relay outlived its link's end")
	}
	// init's socket is taken once: the next use is an exec's.
	p.Hold(context.Background(), sb)()
	if n := x.starts.Load(); n != 1 {
		t.Errorf("%d relay execs after init's ended, want 1", n)
	}
}
