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
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// The relay: a connection to a port on a sandbox's own loopback, made over
// the exec channel, never by opening the sandbox's network. One exec per
// sandbox runs `sandbox-runner relay` inside and carries every preview
// connection as a stream of one multiplexed session (internal/relay): it
// starts on the first connection and ends once none has been open for a
// while, or when the sandbox sleeps, is stopped or ends (the service's
// Channel). Each connection is work on the service's seam (Use): it wakes a
// sleeping sandbox, keeps it from the idle sleep, counts against the org's
// commands, and Stop ends it.

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
var ErrNoListener = relay.ErrNoListener

// relayTimeout bounds a connection's start: the relay's start and the
// runner's answer (a test shortens it).
var relayTimeout = 30 * time.Second

// relayLinger is how long a sandbox's relay is kept with no connection
// open: a page's next request, or the next page, reuses it (a test
// shortens it).
var relayLinger = 15 * time.Second

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
	dctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	var c net.Conn
	for try := 0; ; try++ {
		var s *session
		s, err = p.sessions.get(p, sb)
		if err == nil {
			c, err = s.connect(dctx, port)
		}
		// A session that ended under us (its sandbox slept and woke, its
		// exec died) is left for a new one, once.
		if err == nil || try > 0 || errors.Is(err, ErrNoListener) || dctx.Err() != nil {
			break
		}
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

// sessions are the relay sessions, one per running sandbox.
type sessions struct {
	mu     sync.Mutex
	m      map[string]*session // by sandbox id
	closed bool
	wg     sync.WaitGroup // the sessions' exec goroutines
}

// Close ends every sandbox's relay and waits for their execs to return;
// a dial after it fails. The sandboxes' connections end with them.
func (p *Previews) Close() {
	ss := &p.sessions
	ss.mu.Lock()
	ss.closed = true
	var all []*session
	for _, s := range ss.m {
		all = append(all, s)
	}
	ss.mu.Unlock()
	for _, s := range all {
		<-s.ready
		if s.err == nil {
			s.mu.Lock()
			s.stopped = true
			s.mu.Unlock()
			s.end()
		}
	}
	ss.wg.Wait()
}

// session is one sandbox's relay: the exec and the multiplexer over it.
type session struct {
	name    string // the container it runs in
	ready   chan struct{}
	err     error // why it did not start; set before ready closes
	client  *relay.Client
	end     func() // ends the exec
	mu      sync.Mutex
	open    int // connections open
	idle    *time.Timer
	stopped bool
}

// get is sb's session, started when it has none (or its old one ran in a
// container since replaced).
func (ss *sessions) get(p *Previews, sb *sandbox.Sandbox) (*session, error) {
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return nil, errors.New("the server is shutting down")
	}
	s := ss.m[sb.ID]
	if s != nil && (s.name != sb.Name || s.ended()) {
		s = nil
	}
	if s == nil {
		if ss.m == nil {
			ss.m = map[string]*session{}
		}
		s = &session{name: sb.Name, ready: make(chan struct{})}
		ss.m[sb.ID] = s
		ss.wg.Add(1)
		go func() {
			defer ss.wg.Done()
			ss.start(p, sb, s)
		}()
	}
	ss.mu.Unlock()
	<-s.ready
	if s.err != nil {
		return nil, s.err
	}
	return s, nil
}

// start runs sb's relay exec for as long as its channel is held.
func (ss *sessions) start(p *Previews, sb *sandbox.Sandbox, s *session) {
	r := p.relay
	chctx, release := p.svc.Channel(sb)
	// stdin is an OS pipe, not an io.Pipe: the runtime hands its read end
	// to the relay instead of copying into it.
	inR, inW, err := os.Pipe()
	if err != nil {
		release()
		s.err = err
		ss.forget(sb.ID, s)
		close(s.ready)
		return
	}
	outR, outW := io.Pipe()
	client, err := relay.NewClient(pipeConn{r: outR, w: inW})
	if err != nil {
		release()
		inR.Close()
		inW.Close()
		s.err = err
		ss.forget(sb.ID, s)
		close(s.ready)
		return
	}
	s.client, s.end = client, release
	s.idle = time.AfterFunc(relayLinger, s.linger)
	close(s.ready)
	err = r.Runtime.Exec(chctx, sb.Name, runtime.ExecRequest{Argv: []string{r.Runner.RunnerPath(), "relay"}, Dir: "/", Stdin: inR, Stdout: outW, Stderr: io.Discard})
	if err == nil {
		err = io.EOF
	}
	outW.CloseWithError(err)
	inR.Close()
	client.Close()
	release()
	ss.forget(sb.ID, s)
}

// forget drops s from the map, if it is still sb's.
func (ss *sessions) forget(id string, s *session) {
	ss.mu.Lock()
	if ss.m[id] == s {
		delete(ss.m, id)
	}
	ss.mu.Unlock()
}

func (s *session) ended() bool {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return true
	}
	select {
	case <-s.ready:
		if s.err != nil {
			return true
		}
		select {
		case <-s.client.Done():
			return true
		default:
		}
	default:
	}
	return false
}

// connect opens a connection on the session, which keeps it from its idle
// end until the connection closes.
func (s *session) connect(ctx context.Context, port int) (net.Conn, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, errors.New("the relay ended")
	}
	s.open++
	s.idle.Stop()
	s.mu.Unlock()
	c, err := s.client.Connect(ctx, port)
	if err != nil {
		s.closed()
		return nil, err
	}
	return &sessionConn{Conn: c, s: s}, nil
}

// closed counts a connection's end; the last starts the linger.
func (s *session) closed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.open == 0 && !s.stopped {
		s.idle.Reset(relayLinger)
	}
}

// linger ends the session when no connection opened in the meantime.
func (s *session) linger() {
	s.mu.Lock()
	if s.open > 0 || s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	s.end()
}

type sessionConn struct {
	net.Conn
	s    *session
	once sync.Once
}

func (c *sessionConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.s.closed)
	return err
}

// pipeConn is the session's connection: the exec's stdout to read, its
// stdin to write.
type pipeConn struct {
	r *io.PipeReader
	w *os.File
}

func (c pipeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c pipeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c pipeConn) Close() error {
	c.w.Close()
	return c.r.Close()
}
