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

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// The relay: a connection to a port on a sandbox's own loopback, made over
// the exec channel (sandbox-runner connect, run inside), never by opening
// the sandbox's network. The connection is work on the service's seam
// (Use): it wakes a sleeping sandbox, keeps it from the idle sleep, counts
// against the org's commands, and Stop ends it.

// Execer is the runtime's exec channel, which the relay runs over.
type Execer interface {
	Exec(ctx context.Context, name string, req runtime.ExecRequest) error
}

// Relay is what a preview reaches a port through: the runtime's exec
// channel and its in-sandbox runner. A nil Runner (a backend with none)
// answers every dial with runtime.Unsupported of Backend (501).
type Relay struct {
	Runtime Execer
	Runner  runtime.Runner
	// Backend names the backend, for the 501.
	Backend string
}

// ErrNoListener says nothing listens on the port inside.
var ErrNoListener = errors.New("nothing listens on that port")

// relayTimeout bounds the relay's start: the runner's one NUL byte that
// says it connected (a test shortens it).
var relayTimeout = 30 * time.Second

// DialPort connects to port inside sandbox id of the caller's org; the
// connection lives until it is closed (not with ctx, which only bounds
// the dial). Nothing listening is KindBadGateway (502), a relay that does
// not connect within 30 s KindTimeout.
func (p *Previews) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	r := p.relay
	if r.Runner == nil {
		return nil, runtime.Unsupported(r.Backend, runtime.CapRunner)
	}
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "port %d: a port is 1-65535", port)
	}
	sb, work, done, err := p.svc.Use(context.WithoutCancel(ctx), id)
	if err != nil {
		return nil, err
	}
	// stdin is an OS pipe, not an io.Pipe: the runtime hands its read end
	// to the relay instead of copying into it, so the relay's end (nothing
	// listening, say) ends the exec at once.
	inR, inW, err := os.Pipe()
	if err != nil {
		done()
		return nil, err
	}
	work, cancel := context.WithCancel(work)
	outR, outW := io.Pipe()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer done()
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
	c := &portConn{r: outR, w: inW, cancel: cancel, ended: ended}
	// The relay says it connected with one NUL byte; nothing else can come
	// first.
	first := make([]byte, 1)
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(outR, first)
		got <- err
	}()
	timeout := time.NewTimer(relayTimeout)
	defer timeout.Stop()
	select {
	case err := <-got:
		if err != nil {
			c.Close()
			if errors.Is(err, ErrNoListener) {
				return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "nothing listens on port "+strconv.Itoa(port)+" in sandbox "+sb.ID)
			}
			return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "the preview relay could not start")
		}
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	case <-timeout.C:
		c.Close()
		return nil, sandbox.Errorf(sandbox.KindTimeout, "the preview relay did not connect within 30 s")
	}
	return c, nil
}

// portConn is a preview connection: reads are the relay's stdout, writes
// its stdin. Deadlines are not kept (the HTTP proxy over it sets none).
type portConn struct {
	r      *io.PipeReader
	w      *os.File
	cancel context.CancelFunc
	ended  chan struct{}
	once   sync.Once
}

func (c *portConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *portConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close ends the relay inside.
func (c *portConn) Close() error {
	c.once.Do(func() {
		c.w.Close()
		c.cancel()
		c.r.Close()
	})
	return nil
}

func (c *portConn) LocalAddr() net.Addr              { return previewAddr{} }
func (c *portConn) RemoteAddr() net.Addr             { return previewAddr{} }
func (c *portConn) SetDeadline(time.Time) error      { return nil }
func (c *portConn) SetReadDeadline(time.Time) error  { return nil }
func (c *portConn) SetWriteDeadline(time.Time) error { return nil }

type previewAddr struct{}

func (previewAddr) Network() string { return "sandbox" }
func (previewAddr) String() string  { return "sandbox-preview" }
