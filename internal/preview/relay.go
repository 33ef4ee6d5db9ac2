package preview

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/relay"
	"github.com/sandboxd/sandbox/internal/relay/pool"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// The relay: a connection to a port on a sandbox's own loopback, made over
// the exec channel, never by opening the sandbox's network. One exec per
// sandbox runs `sandbox-runner relay` inside and carries every preview
// connection as a stream of one multiplexed session (internal/relay/pool).
// Each connection is work on the service's seam (Use): it wakes a sleeping
// sandbox, keeps it from the idle sleep, counts against the org's commands,
// and Stop ends it.

// Relay is what a preview reaches a port through: the relays of the
// server's sandboxes, and the exec channel for a sandbox whose runner
// predates them (`sandbox-runner connect`, an exec per connection). A nil
// Pool (a backend with no runner) answers every dial with
// runtime.Unsupported of Backend (501).
type Relay struct {
	Pool    *pool.Pool
	Runtime Execer
	Runner  runtime.Runner
	// Backend names the backend, for the 501.
	Backend string
}

// Execer is the runtime's exec channel.
type Execer interface {
	Exec(ctx context.Context, name string, req runtime.ExecRequest) error
}

// ErrNoListener says nothing listens on the port inside.
var ErrNoListener = relay.ErrNoListener

// relayTimeout bounds a connection's start: the relay's start and the
// runner's answer (a test shortens it).
var relayTimeout = 30 * time.Second

// DialPort connects to port inside sandbox id of the caller's org; the
// connection lives until it is closed (not with ctx, which only bounds
// the dial). Nothing listening is KindBadGateway (502), a relay that does
// not connect within 30 s KindTimeout.
func (p *Previews) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	r := p.relay
	if r.Pool == nil {
		return nil, runtime.Unsupported(r.Backend, runtime.CapRunner)
	}
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "port %d: a port is 1-65535", port)
	}
	sb, work, done, err := p.svc.Use(context.WithoutCancel(ctx), id)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	c, err := r.Pool.Connect(dctx, sb, port)
	if errors.Is(err, relay.ErrNoRelay) && r.Runtime != nil && r.Runner != nil {
		c, err = r.dialExec(dctx, sb, port)
	}
	if err != nil {
		done()
		switch {
		case errors.Is(err, ErrNoListener):
			return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "nothing listens on port "+strconv.Itoa(port)+" in sandbox "+sb.ID)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case dctx.Err() != nil:
			return nil, sandbox.Errorf(sandbox.KindTimeout, "the preview relay did not connect within %s", relayTimeout)
		}
		return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "the preview relay could not start")
	}
	pc := &portConn{Conn: c, done: done}
	// Stop (or the sandbox's end) cancels the work: the connection ends.
	pc.stop = context.AfterFunc(work, func() { pc.Close() })
	return pc, nil
}

// portConn is a preview connection: a stream of the sandbox's relay
// session, and the work it is.
type portConn struct {
	net.Conn
	done func()
	stop func() bool
	once sync.Once
}

func (c *portConn) Close() error {
	c.once.Do(func() {
		c.Conn.Close()
		c.stop()
		c.done()
	})
	return nil
}

// dialExec is a connection over an exec of its own (`sandbox-runner
// connect PORT`): the way to a sandbox whose runner has no relay (started
// before the server's upgrade). It lives until closed, or until ctx ends
// before it connected.
func (r Relay) dialExec(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	// stdin is an OS pipe, not an io.Pipe: the runtime hands its read end
	// to the relay instead of copying into it.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	outR, outW := io.Pipe()
	go func() {
		err := r.Runtime.Exec(work, sb.Name, runtime.ExecRequest{Argv: []string{r.Runner.RunnerPath(), "connect", strconv.Itoa(port)}, Dir: "/", Stdin: inR, Stdout: outW, Stderr: io.Discard})
		var exit *runtime.ExitError
		if errors.As(err, &exit) && exit.Code == 4 {
			err = ErrNoListener
		}
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.Close()
	}()
	c := &execConn{r: outR, w: inW, cancel: cancel}
	// The runner says it connected with one NUL byte; nothing else can
	// come first.
	got := make(chan error, 1)
	go func() {
		first := make([]byte, 1)
		_, err := io.ReadFull(outR, first)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// execConn is a connection over an exec: reads are its stdout, writes its
// stdin. Deadlines are not kept (the HTTP proxy over it sets none).
type execConn struct {
	r      *io.PipeReader
	w      *os.File
	cancel context.CancelFunc
	once   sync.Once
}

func (c *execConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *execConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close ends the exec inside.
func (c *execConn) Close() error {
	c.once.Do(func() {
		c.w.Close()
		c.cancel()
		c.r.Close()
	})
	return nil
}

func (c *execConn) LocalAddr() net.Addr              { return previewAddr{} }
func (c *execConn) RemoteAddr() net.Addr             { return previewAddr{} }
func (c *execConn) SetDeadline(time.Time) error      { return nil }
func (c *execConn) SetReadDeadline(time.Time) error  { return nil }
func (c *execConn) SetWriteDeadline(time.Time) error { return nil }

type previewAddr struct{}

func (previewAddr) Network() string { return "sandbox" }
func (previewAddr) String() string  { return "sandbox-preview" }
