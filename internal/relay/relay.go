// Package relay is the wire of the preview relay: one stream-multiplexer
// session (yamux) over the stdin and stdout of one long-lived exec, from
// the server to `sandbox-runner relay` inside a sandbox, or over the
// socket a gVisor sandbox's init was started with (the runner's init
// serves it there, with no process of its own). Each stream the
// server opens is one connection to a port on the sandbox's own loopback,
// so a new preview connection costs a frame, not a process start on the
// host and another inside.
//
// The session begins with a hello each way (the line "sandbox-relay 1"):
// a runner that predates the relay reads the server's as a bad program
// spec and exits at once, so the server can tell it apart (ErrNoRelay)
// and fall back to an exec per call.
//
// A stream begins with the server's request — the byte 'c' and the port,
// two bytes big-endian, or the byte 'p' and two zero bytes for the
// sandbox's process daemon (cmd/sandbox-runner's procd) — and the
// runner's answer, one byte: 0 connected, 4 nothing listens on the port,
// 3 no process daemon. The bytes of the connection follow, both ways, with
// half-closes passed through.
//
// The other way, the sandbox's API socket: the server's request 'i' (two
// zero bytes) asks the runner to listen inside (cmd/sandbox-runner: a Unix
// socket beside the lease credential) for as long as that stream stays
// open; the runner answers 0, or 5 when it cannot listen. Each connection
// made to it inside is a stream the runner opens and the server accepts
// (Client.Accept) and serves as its own API, where the caller still shows
// a credential like any other. A runner opens no stream unasked, so a
// server that never asks never has one to accept.
//
// Both ends use this package, so they cannot drift apart. The runner's end
// runs where hostile code runs: the server reads only the one status byte
// and the yamux frames, which the library bounds (a stream's window), and
// a guard in front of it ends a session whose runner floods it with pings
// or streams (guard).
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

const (
	opConnect        = 'c'
	opProcd          = 'p'
	opInward         = 'i'
	opCredential     = 'w'
	statusOK         = 0
	statusNoDaemon   = 3
	statusNoListener = 4
	statusNoInward   = 5
	statusFailed     = 6
)

// hello opens a session, both ways.
const hello = "sandbox-relay 1\n"

var (
	// ErrNoRelay says the runner at the other end has no relay (it
	// predates it, or is no runner).
	ErrNoRelay = errors.New("the sandbox's runner has no relay")
	// ErrNoListener says nothing listens on the port inside.
	ErrNoListener = errors.New("nothing listens on that port")
	// ErrNoDaemon says the sandbox has no process daemon (its init is
	// not the runner's).
	ErrNoDaemon = errors.New("no process daemon in this sandbox")
	// ErrNoInward says the runner cannot listen for the sandbox's own
	// calls (it predates the API socket, or has nowhere to put it).
	ErrNoInward = errors.New("the sandbox's runner cannot listen for its API socket")
	// ErrNoCredential says the runner cannot write the lease credential
	// (it predates that, or the directory is not the user's).
	ErrNoCredential = errors.New("the sandbox's runner cannot write the credential")
)

// Targets are what the runner's end connects a stream to.
type Targets struct {
	// Port dials a port on the sandbox's own loopback.
	Port func(port int) (net.Conn, error)
	// Procd dials the process daemon.
	Procd func() (net.Conn, error)
	// Inward listens for the sandbox's own calls to the server (the API
	// socket); the listener is closed when the server stops asking.
	Inward func() (net.Listener, error)
	// Credential writes the lease credential (an empty one removes it).
	Credential func(token []byte) error
}

// acceptBacklog bounds the runner's streams not yet accepted by the
// server (its calls on the API socket, above the pool's maxInward).
const acceptBacklog = 32

// MaxCredential bounds a credential the runner's end reads.
const MaxCredential = 64 << 10

// config is both ends' session configuration.
func config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	// A stream's window bounds what either end buffers for it; 1 MiB lets
	// a page's large asset flow without a window update per 256 KiB.
	c.MaxStreamWindowSize = 1 << 20
	// A half-closed stream whose other end never closes is reset after
	// this, so neither end keeps it.
	c.StreamCloseTimeout = 30 * time.Second
	c.KeepAliveInterval = 15 * time.Second
	return c
}

// Option sets something of a session, at both ends alike.
type Option func(*yamux.Config)

// Quiet is a session with no keep-alive: one over a socket whose end each
// side hears of at once (the one a sandbox's init serves, see
// cmd/sandbox-runner), which lives as long as its sandbox does. A ping each
// way every 15 s would only wake every idle sandbox (~1 ms of CPU a wake
// under systrap).
func Quiet(c *yamux.Config) { c.EnableKeepAlive = false }

// Serve is the runner's end: it accepts streams on rwc until the session
// ends, connecting each to the target it names.
func Serve(rwc io.ReadWriteCloser, to Targets, opts ...Option) error {
	got := make([]byte, len(hello))
	if _, err := io.ReadFull(rwc, got); err != nil {
		return err
	}
	if string(got) != hello {
		return fmt.Errorf("relay: the server said %q, not hello", got)
	}
	if _, err := io.WriteString(rwc, hello); err != nil {
		return err
	}
	// The runner's end keeps no close timer: it half-closes a stream when
	// the answer has ended, and the server closes every stream it opened once
	// it has read it, however slowly its own caller drains the last window;
	// a timer here dropped that tail after 30 s. The server's end keeps its
	// timer: it is the one guarding against a runner that never closes.
	cfg := config()
	cfg.StreamCloseTimeout = 0
	for _, o := range opts {
		o(cfg)
	}
	s, err := yamux.Server(newFrames(rwc), cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		st, err := s.AcceptStream()
		if err != nil {
			if errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		go serveStream(s, st, to)
	}
}

func serveStream(s *yamux.Session, st *yamux.Stream, to Targets) {
	defer st.Close()
	var req [3]byte
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(st, req[:]); err != nil {
		return
	}
	st.SetReadDeadline(time.Time{})
	var c net.Conn
	var err error
	refusal := byte(statusNoListener)
	errNone := errors.New("no such target")
	switch req[0] {
	case opConnect:
		err = errNone
		if to.Port != nil {
			c, err = to.Port(int(req[1])<<8 | int(req[2]))
		}
	case opProcd:
		refusal, err = statusNoDaemon, errNone
		if to.Procd != nil {
			c, err = to.Procd()
		}
	case opInward:
		serveInward(s, st, to.Inward)
		return
	case opCredential:
		serveCredential(st, to.Credential)
		return
	default:
		return
	}
	if err != nil {
		st.Write([]byte{refusal})
		return
	}
	defer c.Close()
	if _, err := st.Write([]byte{statusOK}); err != nil {
		return
	}
	splice(st, c)
}

// serveInward listens for the sandbox's calls while the server's 'i'
// stream stays open, and opens a stream to the server for each.
func serveInward(s *yamux.Session, st *yamux.Stream, listen func() (net.Listener, error)) {
	var ln net.Listener
	err := errors.New("no API socket")
	if listen != nil {
		ln, err = listen()
	}
	if err != nil {
		st.Write([]byte{statusNoInward})
		return
	}
	defer ln.Close()
	if _, err := st.Write([]byte{statusOK}); err != nil {
		return
	}
	go func() {
		io.Copy(io.Discard, st) // until the server closes it, or the session ends
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			out, err := s.OpenStream()
			if err != nil {
				return
			}
			splice(out, c)
		}()
	}
}

// serveCredential reads a credential to the stream's end (the server's
// half-close) and answers whether it was written.
func serveCredential(st *yamux.Stream, write func([]byte) error) {
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	token, err := io.ReadAll(io.LimitReader(st, MaxCredential+1))
	switch {
	case err != nil:
	case len(token) > MaxCredential:
		err = errors.New("too long")
	case write == nil:
		err = errors.New("no writer")
	default:
		err = write(token)
	}
	if err != nil {
		st.Write([]byte{statusFailed})
		return
	}
	st.Write([]byte{statusOK})
}

// splice copies both ways, passing each direction's end on as a
// half-close, until both have ended.
func splice(st *yamux.Stream, c net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(c, st)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			c.Close()
		}
	}()
	io.Copy(st, c)
	st.Close() // our half: the stream ends when the other's does too
	<-done
}

// Client is the server's end of one session.
type Client struct {
	s *yamux.Session
}

// NewClient starts the server's end over rwc (the relay exec's stdout to
// read, its stdin to write) once the runner has answered the hello: an
// answer that is not one is ErrNoRelay. It waits for the answer until
// rwc's reads fail (the caller bounds it by closing rwc).
func NewClient(rwc io.ReadWriteCloser, opts ...Option) (*Client, error) {
	if _, err := io.WriteString(rwc, hello); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoRelay, err)
	}
	got := make([]byte, len(hello))
	if _, err := io.ReadFull(rwc, got); err != nil || string(got) != hello {
		return nil, fmt.Errorf("%w (it answered %q: %v)", ErrNoRelay, got, err)
	}
	// The guard learns the session's streams once there is a session; the
	// runner opens none before it is asked.
	var sess atomic.Pointer[yamux.Session]
	wire := &guarded{frames: newFrames(rwc), g: guard{streams: func() int {
		if s := sess.Load(); s != nil {
			return s.NumStreams()
		}
		return 0
	}}}
	cfg := config()
	// The runner's streams wait here to be accepted; past the backlog the
	// library resets them, keeping nothing of theirs.
	cfg.AcceptBacklog = acceptBacklog
	for _, o := range opts {
		o(cfg)
	}
	s, err := yamux.Client(wire, cfg)
	if err != nil {
		return nil, err
	}
	sess.Store(s)
	return &Client{s: s}, nil
}

// Connect opens a connection to port inside. It waits for the runner's
// answer until ctx ends: nothing listening is ErrNoListener.
func (c *Client) Connect(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("relay: port %d out of range", port)
	}
	return c.open(ctx, [3]byte{opConnect, byte(port >> 8), byte(port)})
}

// Procd opens a connection to the sandbox's process daemon: no daemon is
// ErrNoDaemon.
func (c *Client) Procd(ctx context.Context) (net.Conn, error) {
	return c.open(ctx, [3]byte{opProcd})
}

// Inward asks the runner to listen for the sandbox's own calls until the
// returned stop is called or the session ends; the calls arrive by
// Accept. A runner that cannot is ErrNoInward.
func (c *Client) Inward(ctx context.Context) (stop func(), err error) {
	st, err := c.open(ctx, [3]byte{opInward})
	if err != nil && !errors.Is(err, ErrNoInward) && ctx.Err() == nil {
		// A runner from before the API socket closes the stream unanswered.
		err = fmt.Errorf("%w (%v)", ErrNoInward, err)
	}
	if err != nil {
		return nil, err
	}
	return func() { st.Close() }, nil
}

// Credential has the runner write token as the sandbox's lease
// credential (empty: remove it), on a stream of its own: no process
// starts. A runner that cannot (it predates this, or the directory is not
// the user's to write) is ErrNoCredential; the caller writes it by an exec.
func (c *Client) Credential(ctx context.Context, token []byte) error {
	if len(token) > MaxCredential {
		return fmt.Errorf("relay: a credential of %d bytes", len(token))
	}
	st, err := c.s.OpenStream()
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var status [1]byte
	_, err = st.Write(append([]byte{opCredential, 0, 0}, token...))
	if err == nil {
		err = st.Close() // the end of the credential; the answer still comes
	}
	if err == nil {
		_, err = io.ReadFull(st, status[:])
	}
	if !stop() && ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && status[0] != statusOK {
		err = fmt.Errorf("it answered %d", status[0])
	}
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrNoCredential, err)
	}
	return nil
}

// Accept waits for the next call from inside the sandbox (see Inward): a
// connection to serve as the server's own API. It fails once the session
// has ended.
func (c *Client) Accept() (net.Conn, error) {
	st, err := c.s.AcceptStream()
	if err != nil {
		return nil, err
	}
	return conn{st}, nil
}

func (c *Client) open(ctx context.Context, req [3]byte) (net.Conn, error) {
	st, err := c.s.OpenStream()
	if err != nil {
		return nil, err
	}
	// ctx's end unblocks the wait; ctx.Err() then says why.
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var status [1]byte
	_, err = st.Write(req[:])
	if err == nil {
		_, err = io.ReadFull(st, status[:])
	}
	if !stop() && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	st.SetDeadline(time.Time{})
	switch status[0] {
	case statusOK:
		return conn{st}, nil
	case statusNoListener:
		st.Close()
		return nil, ErrNoListener
	case statusNoDaemon:
		st.Close()
		return nil, ErrNoDaemon
	case statusNoInward:
		st.Close()
		return nil, ErrNoInward
	default:
		st.Close()
		return nil, fmt.Errorf("relay: the runner answered %d", status[0])
	}
}

// conn is a stream as the server holds it: CloseWrite is yamux's Close
// (a FIN: the app reads its end, and may still answer); Close also drops
// what is still to come, unblocking a read in progress.
type conn struct{ *yamux.Stream }

func (c conn) CloseWrite() error { return c.Stream.Close() }

func (c conn) Close() error {
	err := c.Stream.Close()
	c.Stream.SetReadDeadline(time.Unix(1, 0))
	return err
}

// Streams reports how many streams are open.
func (c *Client) Streams() int { return c.s.NumStreams() }

// Done is closed when the session has ended.
func (c *Client) Done() <-chan struct{} { return c.s.CloseChan() }

// Close ends the session and every stream on it.
func (c *Client) Close() error { return c.s.Close() }
