// Package pool keeps the server's end of the relays (internal/relay): one
// long-lived exec of `sandbox-runner relay` per running sandbox, started on
// first use and ended once nothing has used it for a while, or when the
// sandbox sleeps, is stopped or ends (the service's Channel). Previews open
// their connections on it and the process daemon is reached through it, so
// neither costs a process start per call. Where the backend started the
// sandbox's init with a way in (InitLinks), the relay is init's instead:
// no exec, kept until the channel ends.
//
// The other way, a relay carries the sandbox's own calls to this server:
// its runner listens on the sandbox's API socket while the relay lives,
// and each call is served by the server's API (Pool.API), where it shows
// the lease credential like any caller. So that code in the sandbox finds
// the socket whenever it runs, a command holds its sandbox's relay while
// it runs (Hold), and a relay whose sandbox has a background process
// running (Pool.Busy) outlives its linger.
package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/relay"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Execer is the runtime's exec channel, which a relay runs over.
type Execer interface {
	Exec(ctx context.Context, name string, req runtime.ExecRequest) error
}

// InitLinks hands over, once, the server's end of a relay a sandbox's init
// serves from its start (gVisor: a socket given as its stdin): such a
// relay costs no process, so it is kept for as long as its sandbox runs,
// with no linger, no keep-alive, and its API socket always there. A
// sandbox without one (restored, started by another server process, or
// on a backend that has none) is relayed by an exec as before.
type InitLinks interface {
	TakeInitLink(name string) (net.Conn, bool)
}

// Channels holds channels open into sandboxes (the service's Channel): a
// channel's context ends when its sandbox sleeps, is stopped or ends.
type Channels interface {
	Channel(sb *sandbox.Sandbox) (ctx context.Context, done func())
}

// DefaultLinger is how long a relay is kept with nothing open on it: a
// page's next request, or the next call, reuses it.
const DefaultLinger = 15 * time.Second

// Pool is the relays of one server.
type Pool struct {
	rt     Execer
	runner runtime.Runner
	ch     Channels
	// Linger overrides DefaultLinger (a test shortens it).
	Linger time.Duration
	// API serves the calls code in a sandbox makes on its API socket;
	// nil: no sandbox has one. Set before the first use.
	API http.Handler
	// Log, if set, hears of a relay that ended by itself (not by its
	// linger, a stop, a sleep or the server's shutdown), with the last
	// words the runner wrote: every preview of that sandbox broke with it.
	Log *slog.Logger
	// Busy says whether a sandbox runs work of its own (a background
	// process), which keeps a relay with an API socket past its linger.
	Busy func(ctx context.Context, sb *sandbox.Sandbox) bool
	// Forward, if set, is the backend's own port forward, which Connect
	// tries first: a connection through it costs no stream of a relay nor
	// the relay's process inside (gVisor: runsc's PortForward). A sandbox
	// it cannot forward to is reached through the relay.
	Forward runtime.PortForwarder
	// Count, if set, hears of each connection Connect opens, by its
	// path: "forward" or "relay".
	Count func(path string)
	// Init, if set, is the backend's relays served by sandboxes' init,
	// which a new link takes before it starts an exec.
	Init InitLinks

	apiOnce sync.Once
	apiSrv  *http.Server

	mu     sync.Mutex
	m      map[string]*link // by sandbox id
	none   map[string]bool  // containers whose runner has no relay, by name/uid
	closed bool
	wg     sync.WaitGroup // the links' exec goroutines
}

// New is a pool of relays run over rt with runner, held open by ch.
func New(rt Execer, runner runtime.Runner, ch Channels) *Pool {
	return &Pool{rt: rt, runner: runner, ch: ch}
}

// Connect opens a connection to port on sb's own loopback, through the
// backend's forward where it can, else the relay: nothing listening is
// relay.ErrNoListener. A sandbox whose runner predates the
// relay (started before an upgrade) is reached by an exec of
// `sandbox-runner connect` per connection instead. sb is in use by the
// caller.
func (p *Pool) Connect(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	if p.Forward != nil {
		c, err := p.Forward.ForwardPort(ctx, sb.Name, port)
		switch {
		case err == nil:
			p.count("forward")
			return c, nil
		case errors.Is(err, runtime.ErrRefused):
			return nil, relay.ErrNoListener
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !errors.Is(err, runtime.ErrNoForward) && p.Log != nil:
			p.Log.Debug("port forward failed: through the relay", "sandbox", sb.ID, "err", err)
		}
	}
	c, err := p.open(ctx, sb, func(c *relay.Client) (net.Conn, error) { return c.Connect(ctx, port) })
	if errors.Is(err, relay.ErrNoRelay) {
		c, err = p.dialExec(ctx, sb, port)
	}
	if err == nil {
		p.count("relay")
	}
	return c, err
}

func (p *Pool) count(path string) {
	if p.Count != nil {
		p.Count(path)
	}
}

// Procd opens a connection to sb's process daemon: none is
// relay.ErrNoDaemon. sb is in use by the caller.
func (p *Pool) Procd(ctx context.Context, sb *sandbox.Sandbox) (net.Conn, error) {
	return p.open(ctx, sb, func(c *relay.Client) (net.Conn, error) { return c.Procd(ctx) })
}

func (p *Pool) open(ctx context.Context, sb *sandbox.Sandbox, dial func(*relay.Client) (net.Conn, error)) (net.Conn, error) {
	for try := 0; ; try++ {
		s, err := p.get(sb)
		var c net.Conn
		if err == nil {
			c, err = s.open(dial)
		}
		// A link that ended under us (its sandbox slept and woke, its
		// relay was killed) is left for a new one, once.
		if err == nil || try > 0 || errors.Is(err, relay.ErrNoListener) || errors.Is(err, relay.ErrNoDaemon) || errors.Is(err, relay.ErrNoRelay) || ctx.Err() != nil {
			return c, err
		}
	}
}

// Credential writes sb's lease credential (empty: removes it) on a stream
// of sb's relay, started if it has none: no process starts for it. A
// runner that cannot is relay.ErrNoCredential or relay.ErrNoRelay: the
// caller writes it by an exec.
func (p *Pool) Credential(ctx context.Context, sb *sandbox.Sandbox, token string) error {
	s, err := p.get(sb)
	if err != nil {
		return err
	}
	return s.client.Credential(ctx, []byte(token))
}

// Warm starts sb's relay in the background and holds it — a sandbox
// started ahead of its lease (internal/warm), so that the lease's
// credential is written on it and its first command finds the API socket.
// release(true) lets go of it when the sandbox is taken (its lease holds
// its own); release(false) ends it, before the sandbox is deleted.
func (p *Pool) Warm(ctx context.Context, sb *sandbox.Sandbox) (release func(taken bool)) {
	held := make(chan func(), 1)
	go func() { held <- p.Hold(ctx, sb) }()
	return func(taken bool) {
		if taken {
			go func() { (<-held)() }()
			return
		}
		(<-held)() // ctx has ended, or is about to: Hold returns
		p.End(sb)
	}
}

// End ends sb's relay now: its sandbox is about to go without an end the
// service's channels hear of (a warm one the server deletes).
func (p *Pool) End(sb *sandbox.Sandbox) {
	p.mu.Lock()
	s := p.m[sb.ID]
	p.mu.Unlock()
	if s == nil || s.name != sb.Name {
		return
	}
	<-s.ready
	if s.err == nil {
		s.stop()
	}
}

// Close ends every relay and waits for their execs to return; an open
// after it fails.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var all []*link
	for _, s := range p.m {
		all = append(all, s)
	}
	p.mu.Unlock()
	for _, s := range all {
		<-s.ready
		if s.err == nil {
			s.stop()
		}
	}
	p.apiOnce.Do(func() {}) // a serveAPI making the server has made it
	if p.apiSrv != nil {
		p.apiSrv.Close()
	}
	p.wg.Wait()
}

// Hold keeps sb's relay — and with it the sandbox's API socket — while a
// command runs in it. A relay already running costs nothing; else one is
// started and the socket awaited (bounded by ctx and a few seconds), so
// the command finds it from its first instruction. A relay that cannot
// start leaves the command to run without a socket. release ends the hold.
func (p *Pool) Hold(ctx context.Context, sb *sandbox.Sandbox) (release func()) {
	if p.API == nil {
		return func() {}
	}
	s, err := p.get(sb)
	if err != nil || !s.hold() {
		return func() {}
	}
	select {
	case <-s.listening: // the usual case, on every command: no timer
	default:
		wait := time.NewTimer(5 * time.Second)
		select {
		case <-s.listening:
		case <-wait.C:
		case <-ctx.Done():
		}
		wait.Stop()
	}
	var once sync.Once
	return func() { once.Do(s.closed) }
}

// link is one sandbox's relay: the exec and the multiplexer over it.
type link struct {
	name   string // the container it runs in
	linger time.Duration
	kept   bool // init's relay: no linger ends it (InitLinks)
	ready  chan struct{}
	err    error // why it did not start; set before ready closes
	client *relay.Client
	end    func() // ends the exec, or closes init's socket

	mu        sync.Mutex
	nopen     int // connections open, and holds
	idle      *time.Timer
	stopped   bool
	inward    atomic.Bool   // the runner listens on the API socket
	listening chan struct{} // closed once the runner answered the ask for it
	busy      func() bool   // Pool.Busy for this sandbox
	// sb is the sandbox as its holders last named it: a warm sandbox's
	// relay starts before its lease gives it an org (see get).
	sb atomic.Pointer[sandbox.Sandbox]
}

// get is sb's link, started when it has none (or its old one ran in a
// container since replaced, or ended).
func (p *Pool) get(sb *sandbox.Sandbox) (*link, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the server is shutting down")
	}
	if p.none[sb.Name+"/"+sb.UID] {
		p.mu.Unlock()
		return nil, relay.ErrNoRelay
	}
	s := p.m[sb.ID]
	if s != nil && (s.name != sb.Name || s.ended()) {
		s = nil
	}
	if s != nil && sb.Org != "" && s.sb.Load().Org == "" {
		s.sb.Store(sb) // a warm sandbox's relay, now its lease's
	}
	if s == nil {
		if p.m == nil {
			p.m = map[string]*link{}
		}
		linger := p.Linger
		if linger <= 0 {
			linger = DefaultLinger
		}
		s = &link{name: sb.Name, linger: linger, ready: make(chan struct{}), listening: make(chan struct{})}
		s.sb.Store(sb)
		p.m[sb.ID] = s
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.run(sb, s)
		}()
	}
	p.mu.Unlock()
	<-s.ready
	if s.err != nil {
		return nil, s.err
	}
	return s, nil
}

// startTimeout bounds a relay's start: the exec and the runner's hello.
// initHello bounds the hello of init's relay, which runs from the
// sandbox's start: a runner that does not answer within it predates that
// (its init never reads the socket) and is relayed by an exec instead.
const (
	startTimeout = 30 * time.Second
	initHello    = 5 * time.Second
)

// run runs sb's relay for as long as its channel is held: init's
// (InitLinks) when the backend has it, else an exec of the runner's.
func (p *Pool) run(sb *sandbox.Sandbox, s *link) {
	chctx, release := p.ch.Channel(sb)
	fail := func(err error) {
		release()
		s.err = err
		p.forget(sb.ID, s)
		close(s.ready)
	}
	var (
		w      *way
		client *relay.Client
		err    error
	)
	if p.Init != nil {
		if c, ok := p.Init.TakeInitLink(sb.Name); ok {
			w = initWay(chctx, c)
			if client, err = hello(w.conn, initHello, relay.Quiet); err != nil {
				// An init that does not answer (a runner from before
				// init served it): the exec's relay, as for a sandbox
				// without one.
				w.conn.Close()
				w = nil
				if p.Log != nil {
					p.Log.Warn("a sandbox's init did not answer on its relay socket: relayed by an exec instead", "sandbox", sb.ID, "err", err)
				}
			}
		}
	}
	if w == nil {
		if w, err = p.execWay(chctx, sb); err != nil {
			fail(err)
			return
		}
		if client, err = hello(w.conn, startTimeout); err != nil {
			w.conn.Close()
			release()
			<-w.ended
			if errors.Is(err, relay.ErrNoRelay) {
				p.mu.Lock()
				if p.none == nil || len(p.none) > 10000 {
					p.none = map[string]bool{} // bounded: a cache
				}
				p.none[sb.Name+"/"+sb.UID] = true
				p.mu.Unlock()
			}
			fail(err)
			return
		}
	}
	s.client, s.end, s.kept = client, release, w.kept
	if p.Busy != nil {
		s.busy = func() bool {
			ctx, cancel := context.WithTimeout(chctx, 30*time.Second)
			defer cancel()
			return p.Busy(ctx, s.sb.Load())
		}
	}
	s.idle = time.AfterFunc(s.linger, s.lingered)
	if s.kept {
		s.idle.Stop()
	}
	close(s.ready)
	if p.API != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveAPI(chctx, s)
		}()
	}
	byItself := false
	select {
	case <-w.ended:
		byItself = chctx.Err() == nil
	case <-client.Done():
		// The session ended while the exec runs on (a runner that stopped
		// answering its keep-alive, or that flooded the session): the exec
		// goes too, or each such relay would keep its exec (a process on
		// the host, a stream on a cluster) for the sandbox's whole life.
		byItself = chctx.Err() == nil
		release()
		<-w.ended
	}
	if byItself && p.Log != nil {
		p.Log.Warn("a sandbox's relay ended by itself: its previews' connections broke", "sandbox", sb.ID, "init", w.kept, "err", w.err, "stderr", w.stderr.String())
	}
	client.Close()
	w.conn.Close()
	release()
	p.forget(sb.ID, s)
}

// way is a link's way into its sandbox: an exec of the runner's relay, or
// the socket init serves it on.
type way struct {
	conn   io.ReadWriteCloser
	ended  chan struct{}   // closed once the way has ended
	err    error           // the exec's, once ended
	stderr *capture.Buffer // the runner's last words, if it dies
	kept   bool            // init's: kept while its sandbox runs
}

// initWay is init's socket c, closed when chctx ends.
func initWay(chctx context.Context, c net.Conn) *way {
	w := &way{conn: c, ended: make(chan struct{}), stderr: capture.New(0), kept: true}
	go func() {
		<-chctx.Done()
		c.Close()
		close(w.ended)
	}()
	return w
}

// execWay starts `sandbox-runner relay` in sb, until chctx ends.
func (p *Pool) execWay(chctx context.Context, sb *sandbox.Sandbox) (*way, error) {
	// stdin is an OS pipe, not an io.Pipe: the runtime hands its read end
	// to the relay instead of copying into it.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW := io.Pipe()
	w := &way{conn: pipeConn{r: outR, w: inW}, ended: make(chan struct{}), stderr: capture.New(1024)}
	go func() {
		defer close(w.ended)
		w.err = p.rt.Exec(chctx, sb.Name, runtime.ExecRequest{Argv: []string{p.runner.RunnerPath(), "relay"}, Dir: "/", Stdin: inR, Stdout: outW, Stderr: w.stderr})
		err := w.err
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.Close()
	}()
	return w, nil
}

// hello starts the server's end of a session over conn, bounded by
// within.
func hello(conn io.ReadWriteCloser, within time.Duration, opts ...relay.Option) (*relay.Client, error) {
	var late atomic.Bool
	slow := time.AfterFunc(within, func() { late.Store(true); conn.Close() })
	client, err := relay.NewClient(conn, opts...)
	slow.Stop()
	if late.Load() {
		err = fmt.Errorf("the relay did not start within %s", within)
	}
	return client, err
}

// forget drops s from the map, if it is still sb's.
func (p *Pool) forget(id string, s *link) {
	p.mu.Lock()
	if p.m[id] == s {
		delete(p.m, id)
	}
	p.mu.Unlock()
}

func (s *link) ended() bool {
	select {
	case <-s.ready:
	default:
		return false
	}
	if s.err != nil {
		return true
	}
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	select {
	case <-s.client.Done():
		return true
	default:
		return stopped
	}
}

// open opens a connection on the link, which keeps it from its idle
// end until the connection closes.
func (s *link) open(dial func(*relay.Client) (net.Conn, error)) (net.Conn, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, errors.New("the relay ended")
	}
	s.nopen++
	s.idle.Stop()
	s.mu.Unlock()
	c, err := dial(s.client)
	if err != nil {
		s.closed()
		return nil, err
	}
	return &linkConn{Conn: c, s: s}, nil
}

// closed counts a connection's end; the last starts the linger.
func (s *link) closed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nopen--
	if s.nopen == 0 && !s.stopped && !s.kept {
		s.idle.Reset(s.linger)
	}
}

// hold counts a command's hold like a connection; false: the link
// has ended.
func (s *link) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.nopen++
	s.idle.Stop()
	return true
}

// lingered ends the link when nothing opened in the meantime, unless
// its sandbox's own work may still call through it.
func (s *link) lingered() {
	s.mu.Lock()
	if s.nopen > 0 || s.stopped || s.kept {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.inward.Load() && s.busy != nil && s.busy() {
		s.mu.Lock()
		if !s.stopped && s.nopen == 0 {
			s.idle.Reset(s.linger)
		}
		s.mu.Unlock()
		return
	}
	// Checked and stopped under one lock: a connection opened in between
	// would be cut by the stop.
	s.mu.Lock()
	if s.nopen > 0 || s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	s.end()
}

func (s *link) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.end()
}

// maxInward bounds the calls one sandbox has open at once on its API
// socket: more wait, then are refused (see Accept), so one sandbox cannot
// hold the server's connections.
const maxInward = 32

// serveAPI asks s's runner to listen on the sandbox's API socket and
// serves the calls made on it, until the link ends. A runner that
// cannot listen (it predates the socket) leaves the sandbox without one.
func (p *Pool) serveAPI(ctx context.Context, s *link) {
	ictx, cancel := context.WithTimeout(ctx, startTimeout)
	_, err := s.client.Inward(ictx)
	cancel()
	if err == nil {
		s.inward.Store(true)
	}
	close(s.listening)
	if err != nil {
		return
	}
	p.apiOnce.Do(func() {
		p.apiSrv = &http.Server{Handler: p.API, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 64 << 10}
	})
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	p.apiSrv.Serve(&apiListener{s: s, sem: make(chan struct{}, maxInward)})
}

// apiListener is one link's calls from inside, as the API server
// accepts them; each open call holds the link like a connection.
type apiListener struct {
	s   *link
	sem chan struct{}
}

// Accept takes a call's slot before it accepts the call: while maxInward
// are open, the runner's next streams wait in the session's backlog, and
// past it the library resets them — an accepted stream closed at once
// would be kept, with what was sent on it, until the runner closed it too.
func (l *apiListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.s.client.Done():
		return nil, errors.New("the relay ended")
	}
	c, err := l.s.client.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	if !l.s.hold() {
		<-l.sem
		c.Close()
		return nil, errors.New("the relay ended")
	}
	return &apiConn{Conn: c, release: func() { l.s.closed(); <-l.sem }}, nil
}

// Close leaves the link to its own end.
func (l *apiListener) Close() error   { return nil }
func (l *apiListener) Addr() net.Addr { return apiAddr{} }

type apiConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *apiConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *apiConn) RemoteAddr() net.Addr { return apiAddr{} }
func (c *apiConn) LocalAddr() net.Addr  { return apiAddr{} }

type apiAddr struct{}

func (apiAddr) Network() string { return "sandbox" }
func (apiAddr) String() string  { return "sandbox-api-socket" }

// linkConn is a connection of a link, counted until closed.
type linkConn struct {
	net.Conn
	s    *link
	once sync.Once
}

func (c *linkConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.s.closed)
	return err
}

// CloseWrite passes a half-close on.
func (c *linkConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// pipeConn is a link's connection: the exec's stdout to read, its
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

// dialExec is a connection over an exec of its own (`sandbox-runner
// connect PORT`): the way to a sandbox whose runner has no relay (started
// before the server's upgrade). It lives until closed, or until ctx ends
// before it connected.
func (p *Pool) dialExec(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	// stdin is an OS pipe, not an io.Pipe: the runtime hands its read end
	// to the relay instead of copying into it.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	outR, outW := io.Pipe()
	go func() {
		err := p.rt.Exec(work, sb.Name, runtime.ExecRequest{Argv: []string{p.runner.RunnerPath(), "connect", strconv.Itoa(port)}, Dir: "/", Stdin: inR, Stdout: outW, Stderr: io.Discard})
		var exit *runtime.ExitError
		if errors.As(err, &exit) && exit.Code == 4 {
			err = relay.ErrNoListener
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

func (c *execConn) LocalAddr() net.Addr              { return execAddr{} }
func (c *execConn) RemoteAddr() net.Addr             { return execAddr{} }
func (c *execConn) SetDeadline(time.Time) error      { return nil }
func (c *execConn) SetReadDeadline(time.Time) error  { return nil }
func (c *execConn) SetWriteDeadline(time.Time) error { return nil }

type execAddr struct{}

func (execAddr) Network() string { return "sandbox" }
func (execAddr) String() string  { return "sandbox-exec-relay" }
