package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/sync/semaphore"

	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/pages"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/terminal"
	"github.com/sandboxd/sandbox/internal/ticket"
)

// consoles registers the terminal and screen routes under prefix p: the
// tickets (authenticated), the pages (public: they hold no secret) and the
// sockets (the ticket is the credential).
func (s *Server) consoles(p string) {
	ws := []string{"ticket: the single-use ticket (POST …/ticket)"}
	s.handle("POST "+p+"/{id}/terminal/ticket", s.mintTicket(ticket.Terminal), doc{Summary: "A ticket for the terminal socket (single use, 30 s)", Answer: typ[terminal.TicketResult](), Status: 201, Errors: onLease})
	s.handle("POST "+p+"/{id}/screen/ticket", s.mintTicket(ticket.Screen), doc{Summary: "A ticket for the screen socket (single use, 30 s)", Answer: typ[terminal.TicketResult](), Status: 201, Errors: onLease})
	s.public("GET "+p+"/{id}/terminal", func(w http.ResponseWriter, r *http.Request) {
		pages.Terminal().Serve(w, s.opts.FrameAncestors)
	}, doc{Summary: "The terminal page (xterm.js); it opens the socket with the ticket in its URL", AnswerRaw: "text/html", Query: ws})
	s.public("GET "+p+"/{id}/screen", func(w http.ResponseWriter, r *http.Request) {
		pages.Screen().Serve(w, s.opts.FrameAncestors)
	}, doc{Summary: "The screen page (noVNC)", AnswerRaw: "text/html", Query: ws})
	s.public("GET "+p+"/{id}/terminal/ws", s.terminalSocket, doc{Summary: "The terminal as a WebSocket: binary frames both ways; a text frame {\"resize\":{\"cols\":N,\"rows\":N}} resizes",
		Status: 101, Query: append(ws, "arg: a tmux session name to attach or create"), Errors: []int{400, 401, 404, 409, 429, 503}})
	s.public("GET "+p+"/{id}/screen/ws", s.screenSocket, doc{Summary: "The screen as a WebSocket carrying RFB", Status: 101, Query: ws, Errors: []int{400, 401, 404, 409, 429, 503}})
}

func (s *Server) mintTicket(kind string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := decode(r.Body, &struct{}{}); err != nil {
			return err
		}
		id := r.PathValue("id")
		tok, err := s.Consoles.Ticket(r.Context(), id, kind)
		if err != nil {
			return err
		}
		prefix := strings.TrimSuffix(r.URL.Path, "/"+kind+"/ticket")
		writeJSON(w, http.StatusCreated, terminal.TicketResult{
			Ticket: tok, ExpiresIn: int(ticket.TTL / time.Second), URL: prefix + "/" + kind + "?ticket=" + tok,
		})
		return nil
	}
}

// A console socket's input bounds: one frame, and all the frames queued for
// the program's stdin together.
const (
	maxFrame       = 1 << 20
	maxQueuedInput = 1 << 20
)

// pingEvery keeps idle sockets (and what is between) alive and finds dead
// peers.
const pingEvery = 20 * time.Second

// socket is one upgraded console connection: the reader turns frames into
// stdin (and resizes), and output goes back in binary frames.
type socket struct {
	c      *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	stdin  *io.PipeReader
	resize chan runtime.Size
	wg     sync.WaitGroup
	done   func()
	// revoked says the caller's key was revoked while connected.
	revoked atomic.Bool
	// restarting says the server is draining: the close says so, and
	// that a reconnect (to this server's successor) works.
	restarting atomic.Bool
}

// open spends the ticket (refusing with 401 and no upgrade), then upgrades.
// nil means the answer has been written.
func (s *Server) open(w http.ResponseWriter, r *http.Request, kind string, resizable bool) *socket {
	if s.closing.Err() != nil {
		s.writeError(w, r, sandbox.Errorf(sandbox.KindUnavailable, "the server is shutting down"))
		return nil
	}
	ctx, err := s.Consoles.Spend(r.Context(), r.URL.Query().Get("ticket"), r.PathValue("id"), kind)
	if err != nil {
		s.writeError(w, r, err)
		return nil
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:    []string{"binary"}, // noVNC asks for it
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		return nil // Accept has answered
	}
	c.SetReadLimit(maxFrame)
	watched, stopWatch := keywatch.Watch(ctx, s.Keys)
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	k := &socket{c: c, ctx: ctx, cancel: cancel, stdin: pr, resize: make(chan runtime.Size, 8)}
	// A drain closes the connection with a frame that says so, sent before
	// the socket's context goes: cancelling first would drop it with none.
	stopOnClose := context.AfterFunc(s.closing, func() {
		k.restarting.Store(true)
		c.Close(websocket.StatusServiceRestart, restartReason)
		cancel()
	})
	k.done = func() { stopOnClose(); stopWatch() }
	// A revoked key ends the connection with a close frame that says so,
	// sent before the socket's context goes (cancelling a read would drop
	// the connection without one).
	go func() {
		select {
		case <-watched.Done():
			if errors.Is(context.Cause(watched), keywatch.ErrRevoked) {
				k.revoked.Store(true)
				c.Close(websocket.StatusPolicyViolation, sandbox.Message(keywatch.ErrRevoked))
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	// Frames are read without waiting for the program to take its stdin:
	// a reader blocked on a busy shell would leave pongs unread and the
	// ping would drop a healthy connection. Up to 64 frames and
	// maxQueuedInput bytes wait here; past that the reader waits too
	// (backpressure to the client), and a program that takes no input for
	// longer than a ping's patience loses the connection.
	frames := make(chan []byte, 64)
	queued := semaphore.NewWeighted(maxQueuedInput)
	k.wg.Add(3)
	go func() { // frames → queue
		defer k.wg.Done()
		defer cancel()
		defer close(frames)
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageText && resizable {
				if sz, ok := parseResize(data); ok {
					select {
					case k.resize <- sz:
					default: // a flood of resizes: the latest few are enough
					}
					continue
				}
			}
			if queued.Acquire(ctx, int64(len(data))) != nil {
				return
			}
			select {
			case frames <- data:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { // queue → stdin
		defer k.wg.Done()
		defer pw.Close()
		for data := range frames {
			_, err := pw.Write(data)
			queued.Release(int64(len(data)))
			if err != nil {
				for range frames { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	go func() { // pings
		defer k.wg.Done()
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(ctx, pingEvery/2)
				err := c.Ping(pctx)
				pcancel()
				if err != nil {
					cancel()
					return
				}
			}
		}
	}()
	return k
}

// Write sends output as one binary frame.
func (k *socket) Write(p []byte) (int, error) {
	if err := k.c.Write(k.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// close ends the connection with a status and a reason (at most 123 bytes
// by the protocol) and waits for the socket's goroutines. A connection its
// key's revocation ended says so, whatever the program's end.
func (k *socket) close(code websocket.StatusCode, reason string) {
	if k.revoked.Load() {
		code, reason = websocket.StatusPolicyViolation, sandbox.Message(keywatch.ErrRevoked)
	} else if k.restarting.Load() {
		code, reason = websocket.StatusServiceRestart, restartReason
	}
	if len(reason) > 120 { // cut on a character boundary: a browser fails a close with invalid UTF-8
		reason = strings.ToValidUTF8(reason[:120], "")
		for len(reason) > 0 && !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	k.c.Close(code, reason)
	k.cancel()
	k.stdin.Close()
	k.wg.Wait()
	k.c.CloseNow()
	k.done()
}

// parseResize reads a frame that is exactly {"resize":{"cols":N,"rows":M}}.
func parseResize(b []byte) (runtime.Size, bool) {
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte(`{"resize"`)) {
		return runtime.Size{}, false
	}
	var m struct {
		Resize *struct {
			Cols *uint16 `json:"cols"`
			Rows *uint16 `json:"rows"`
		} `json:"resize"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&m) != nil || dec.More() || m.Resize == nil || m.Resize.Cols == nil || m.Resize.Rows == nil ||
		*m.Resize.Cols == 0 || *m.Resize.Rows == 0 {
		return runtime.Size{}, false
	}
	return runtime.Size{Cols: *m.Resize.Cols, Rows: *m.Resize.Rows}, true
}

func (s *Server) terminalSocket(w http.ResponseWriter, r *http.Request) {
	s.live.Add(1)
	defer s.live.Done()
	// The arg is checked before the ticket is spent: a typo costs no ticket.
	arg := r.URL.Query().Get("arg")
	if arg != "" {
		if err := sandbox.CheckSessionName("arg", arg); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	k := s.open(w, r, ticket.Terminal, true)
	if k == nil {
		return
	}
	code, err := s.Consoles.Terminal(k.ctx, r.PathValue("id"), arg, k.stdin, k, k.resize)
	if err != nil {
		k.close(websocket.StatusInternalError, sandbox.Message(err))
		return
	}
	k.close(websocket.StatusNormalClosure, fmt.Sprintf("the shell exited (%d)", code))
}

func (s *Server) screenSocket(w http.ResponseWriter, r *http.Request) {
	s.live.Add(1)
	defer s.live.Done()
	k := s.open(w, r, ticket.Screen, false)
	if k == nil {
		return
	}
	stderr := capture.New(4096)
	code, err := s.Consoles.Screen(k.ctx, r.PathValue("id"), k.stdin, k, stderr)
	switch {
	case err != nil:
		k.close(websocket.StatusInternalError, sandbox.Message(err))
	case code != 0:
		msg := strings.TrimSpace(string(stderr.Bytes()))
		if msg == "" {
			msg = fmt.Sprintf("the display relay exited (%d)", code)
		}
		k.close(websocket.StatusInternalError, msg)
	default:
		k.close(websocket.StatusNormalClosure, "the display closed the connection")
	}
}
