package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/coder/websocket"
	"github.com/sandboxd/sandbox/wire"
)

// Ticket is a single-use ticket for a terminal or screen socket (30 s).
type Ticket = wire.Ticket

// TerminalTicket mints a ticket for the sandbox's terminal (kind
// "terminal") or screen ("screen").
func (c *Client) TerminalTicket(ctx context.Context, id, kind string) (*Ticket, error) {
	var t Ticket
	return &t, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/" + kind + "/ticket", out: &t})
}

// Terminal is a login shell on a pty in a sandbox (or a tmux session):
// what is written is typed, what is read is the screen's bytes. Read
// returns io.EOF once the shell has ended; Reason then says why.
type Terminal struct {
	conn   *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc

	mu  sync.Mutex
	cur io.Reader // the rest of the frame being read

	reason string
}

// Terminal opens the sandbox's terminal; a non-empty session attaches to
// (or creates) that tmux session, which outlives the connection.
func (c *Client) Terminal(ctx context.Context, id, session string) (*Terminal, error) {
	t, err := c.TerminalTicket(ctx, id, "terminal")
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(c.Base)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	u.Scheme = map[string]string{"https": "wss"}[u.Scheme]
	if u.Scheme == "" {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/sandbox/" + esc(id) + "/terminal/ws"
	q := url.Values{"ticket": {t.Ticket}}
	if session != "" {
		q.Set("arg", session)
	}
	u.RawQuery = q.Encode()
	conn, res, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: c.http(), CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if res != nil && res.StatusCode >= 400 {
			return nil, refusal(res)
		}
		return nil, fmt.Errorf("client: terminal: %w", err)
	}
	conn.SetReadLimit(1 << 20)
	tctx, cancel := context.WithCancel(context.Background())
	return &Terminal{conn: conn, ctx: tctx, cancel: cancel}, nil
}

// Read reads the terminal's output.
func (t *Terminal) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if t.cur != nil {
			n, err := t.cur.Read(p)
			if err == io.EOF {
				t.cur = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		_, r, err := t.conn.Reader(t.ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				t.reason = ce.Reason
				if ce.Code == websocket.StatusNormalClosure {
					return 0, io.EOF
				}
				return 0, fmt.Errorf("client: the terminal closed: %s", ce.Reason)
			}
			return 0, err
		}
		t.cur = r
	}
}

// Write types p.
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.conn.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(cols, rows uint16) error {
	b, _ := json.Marshal(map[string]any{"resize": map[string]uint16{"cols": cols, "rows": rows}})
	return t.conn.Write(t.ctx, websocket.MessageText, b)
}

// Reason is the server's word on the end, e.g. "the shell exited (0)".
func (t *Terminal) Reason() string { return t.reason }

// Close hangs up (a tmux session stays).
func (t *Terminal) Close() error {
	err := t.conn.Close(websocket.StatusNormalClosure, "")
	t.cancel()
	return err
}
