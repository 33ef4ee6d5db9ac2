package service

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

// Port previews: a connection to a port on a sandbox's own loopback, made
// over the exec channel (sandbox-runner connect, run inside), never by
// opening the sandbox's network. The connection is work: it wakes a
// sleeping sandbox, keeps it from the idle sleep, and Stop ends it.

// ErrNoListener says nothing listens on the port inside.
var ErrNoListener = errors.New("nothing listens on that port")

// DialPort connects to port inside sandbox id; the connection lives until
// it is closed (not with ctx, which only bounds the dial).
func (s *Service) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if s.caps.Runner == nil {
		return nil, s.unsupported(runtime.CapRunner)
	}
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "port %d: a port is 1-65535", port)
	}
	sb, work, done, err := s.use(context.WithoutCancel(ctx), id, true)
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
	errBuf := NewOutput(1 << 10)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer done()
		err := s.d.Runtime.Exec(work, sb.Name, runtime.ExecRequest{Argv: []string{s.caps.Runner.RunnerPath(), "connect", strconv.Itoa(port)}, Dir: "/", Stdin: inR, Stdout: outW, Stderr: errBuf})
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
	case <-time.After(30 * time.Second):
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
