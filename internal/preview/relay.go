package preview

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/relay"
	"github.com/sandboxd/sandbox/internal/relay/pool"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// The relay: a connection to a port on a sandbox's own loopback, made over
// the sandbox's control channel, never by opening the sandbox's network:
// the backend's own port forward where it has one (gVisor: runsc's
// PortForward), else a stream of the sandbox's relay — one exec of
// `sandbox-runner relay` inside carrying every preview connection as a
// stream of one multiplexed session (internal/relay/pool).
// Each connection is work on the service's seam (Use): it wakes a sleeping
// sandbox, keeps it from the idle sleep, counts against the org's commands,
// and Stop ends it.

// Relay is what a preview reaches a port through: the relays of the
// server's sandboxes. A nil Pool (a backend with no runner) answers every
// dial with runtime.Unsupported of Backend (501).
type Relay struct {
	Pool *pool.Pool
	// Backend names the backend, for the 501.
	Backend string
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
