// Package terminal is the console of a sandbox: the single-use tickets that
// open one, a login shell (or a tmux session) on a pty, and the desktop's
// screen relayed as raw RFB bytes. It reaches sandboxes only through the
// narrow Sandboxes interface below — the service's Run, the one exec
// primitive — so it holds no lease policy of its own: a connection is
// ordinary work that keeps its sandbox awake and its lease extended.
//
// The WebSocket side (frames, pings, resize messages) is the API's; this
// package sees a reader, a writer and a channel of sizes.
package terminal

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/ticket"
	"github.com/sandboxd/sandbox/wire"
)

// Sandboxes is what the console needs of the service.
type Sandboxes interface {
	// Wake wakes a sleeping sandbox and answers it; one that cannot run
	// is an error.
	Wake(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// Run runs one program in a sandbox of the caller's org.
	Run(ctx context.Context, id string, cmd service.Command) (service.Outcome, error)
	// Use holds a sandbox of the caller's org in use (woken, counted as
	// one command) until done; RunIn runs a program in it, under that use.
	Use(ctx context.Context, id string) (sb *sandbox.Sandbox, work context.Context, done func(), err error)
	RunIn(ctx, work context.Context, sb *sandbox.Sandbox, cmd service.Command) (service.Outcome, error)
}

var _ Sandboxes = (*service.Service)(nil)

// Ports reaches a port on a sandbox's own loopback without a process per
// connection (internal/relay/pool: runsc's port forward on gVisor, a
// stream of the sandbox's relay on a cluster). It is no work of its own:
// the screen runs the connection as its command.
type Ports interface {
	Connect(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error)
}

// Consoles opens terminals and screens.
type Consoles struct {
	sb      Sandboxes
	ports   Ports
	tickets *ticket.Book
}

// WithPorts has a screen reach a display that listens already through p,
// and exec the display's script only to start one.
func (c *Consoles) WithPorts(p Ports) *Consoles {
	c.ports = p
	return c
}

// New returns the consoles over sb; now is the tickets' clock (nil means
// time.Now).
func New(sb Sandboxes, now func() time.Time) *Consoles {
	return &Consoles{sb: sb, tickets: ticket.New(now)}
}

// TicketResult is a minted ticket.
type TicketResult = wire.Ticket

// Ticket mints a single-use ticket for the terminal or the screen (kind)
// of a sandbox of the caller's org. A sleeping sandbox is woken first; one
// that cannot run, or a screen of a class without a display, is a 409.
func (c *Consoles) Ticket(ctx context.Context, id, kind string) (string, error) {
	p, ok := sandbox.PrincipalFrom(ctx)
	if !ok {
		return "", sandbox.Errorf(sandbox.KindUnauthorized, "no principal")
	}
	sb, err := c.sb.Wake(ctx, id)
	if err != nil {
		return "", err
	}
	if kind == ticket.Screen {
		if cl, err := sandbox.LookupClass(sb.Class); err != nil || !cl.Display {
			return "", sandbox.Errorf(sandbox.KindConflict, "sandbox %s is class %s, which has no screen: lease class desktop", sb.ID, sb.Class)
		}
	}
	token, _, ok := c.tickets.MintFor(p.Org, p.Key, sb.ID, kind)
	if !ok {
		return "", &sandbox.Error{Kind: sandbox.KindLimit, Msg: "too many unspent tickets: use or let expire the ones you hold", RetryAfter: int(ticket.TTL / time.Second)}
	}
	return token, nil
}

// Spend spends a ticket (before checking it) and answers what it grants:
// the context of its org, for a connection to sandbox id.
func (c *Consoles) Spend(ctx context.Context, token, id, kind string) (context.Context, error) {
	t, ok := c.tickets.Spend(token, id, kind)
	if !ok {
		return nil, sandbox.Errorf(sandbox.KindUnauthorized, "the ticket is missing, expired, already used, or for another %s: mint a new one with POST .../%s/ticket", kind, kind)
	}
	return sandbox.WithPrincipal(ctx, sandbox.Principal{Org: t.Org, Subject: "ticket", Key: t.Key}), nil
}

// shellScript starts the login shell a terminal opens: zsh, else bash,
// else sh; or, with $1, attaches to (or creates) that tmux session.
const shellScript = `if [ -n "${1:-}" ]; then
  command -v tmux >/dev/null 2>&1 || { echo "tmux is not installed in this sandbox's image" >&2; exit 127; }
  exec tmux new-session -A -s "$1"
fi
if command -v zsh >/dev/null 2>&1; then
  # Without a ~/.zshrc, zsh greets with a setup menu that eats the first keys.
  [ -e "$HOME/.zshrc" ] || : >"$HOME/.zshrc"
  exec zsh -l
fi
command -v bash >/dev/null 2>&1 && exec bash -l
exec sh -l`

// Terminal runs a login shell (or tmux session arg, validated by the
// caller) on a pty in sandbox id until it exits or ctx ends, and answers
// its exit code. While it runs the sandbox is in use — never idle — and
// its lease is extended.
func (c *Consoles) Terminal(ctx context.Context, id, arg string, stdin io.Reader, stdout io.Writer, resize <-chan runtime.Size) (int, error) {
	if arg != "" {
		if err := sandbox.CheckSessionName("arg", arg); err != nil {
			return 0, err
		}
	}
	argv := []string{"sh", "-c", shellScript, "sh"}
	if arg != "" {
		argv = append(argv, arg)
	}
	return c.attach(ctx, id, runtime.ExecRequest{Argv: argv, TTY: true, Stdin: stdin, Stdout: stdout, Resize: resize})
}

// displayScript starts the desktop's display once (Xvfb, a window manager,
// a terminal, and a VNC server on 127.0.0.1:5900 only), then relays the
// VNC port over stdin/stdout. A sandbox woken from sleep may have lost its
// display; this brings it back. Failures are said on stderr. The window
// manager starts the terminal once it manages the screen: a terminal
// mapped while openbox starts stayed unmanaged, its window unshown, for
// ~20 s (measured). x11vnc serves its clients on threads of their own:
// in its single loop a new client waited 0.5-1 s for the protocol's first
// bytes on an idle machine (0.1 s threaded) and tens of seconds on a busy
// one, and each connection cost it ~0.5 s of CPU; so the wait for its
// port reads the listening sockets rather than connecting to try, and a
// display that listens already costs no process but the relay's.
const displayScript = `export DISPLAY=:0
listening() { # x11vnc's port in LISTEN, read with the shell's builtins
  while read -r _ local _ st _; do
    [ "$local" = 0100007F:170C ] && [ "$st" = 0A ] && return 0
  done < /proc/net/tcp
  return 1
}
if ! listening; then
  if ! pgrep -x Xvfb >/dev/null 2>&1; then
    mkdir -p -m 1777 /tmp/.X11-unix # Xvfb makes it only as root
    setsid Xvfb :0 -screen 0 1280x800x24 -nolisten tcp >/tmp/.xvfb.log 2>&1 < /dev/null &
    for i in $(seq 50); do [ -e /tmp/.X11-unix/X0 ] && break; sleep 0.1; done
    setsid openbox --startup xterm >/dev/null 2>&1 < /dev/null &
  fi
  if ! pgrep -x x11vnc >/dev/null 2>&1; then
    setsid x11vnc -display :0 -localhost -rfbport 5900 -forever -shared -nopw -quiet -threads >/tmp/.x11vnc.log 2>&1 < /dev/null &
  fi
  i=0
  until listening; do
    i=$((i + 1))
    if [ $i -gt 300 ]; then # ~30 s: the checks cost no process
      echo "the display did not start: $(tail -n 3 /tmp/.xvfb.log /tmp/.x11vnc.log 2>/dev/null)" >&2
      exit 1
    fi
    sleep 0.1
  done
fi
exec socat - TCP:127.0.0.1:5900`

// displayPort is the VNC server's port on the sandbox's loopback (the
// script's 0x170C).
const displayPort = 5900

// Screen relays the desktop's VNC server (RFB bytes, untranslated: no tty)
// of sandbox id until either side closes. Like a terminal it keeps the
// sandbox in use and its lease extended. A display that listens already
// is reached through the ports (no process inside: the script's exec of
// sh and socat was most of a new connection's cost); one that does not —
// the first connection, or a sandbox woken without its display — is
// started by the script, which then relays.
func (c *Consoles) Screen(ctx context.Context, id string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	req := runtime.ExecRequest{Argv: []string{"sh", "-c", displayScript}, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	if c.ports == nil {
		return c.attach(ctx, id, req)
	}
	// The connection is made under the screen's use of the sandbox, the
	// one command it counts: no sleep comes between the connect and its run.
	sb, work, done, err := c.sb.Use(ctx, id)
	if err != nil {
		return 0, err
	}
	defer done()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the dial's, as a preview's
	conn, err := c.ports.Connect(dctx, sb, displayPort)
	cancel()
	var exec func(context.Context, string, runtime.ExecRequest) error
	switch {
	case err == nil:
		defer conn.Close() // also when the service runs nothing (a sandbox that went)
		// The connection is the command: the service runs it as it runs
		// the script (the lease extended, ended by a stop).
		exec = func(ctx context.Context, _ string, req runtime.ExecRequest) error {
			defer conn.Close()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			go func() {
				io.Copy(conn, req.Stdin)
				conn.Close() // the client went away: so does the display's side
			}()
			io.Copy(req.Stdout, conn)
			return ctx.Err()
		}
	case ctx.Err() != nil:
		return 0, nil // the client went away
	}
	return answer(ctx)(c.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: req, KeepAlive: true, Code: true, Exec: exec}))
}

// attach runs an interactive program as a connection: it keeps the
// sandbox in use and its lease extended while it runs, and answers the
// program's exit code (137 after a stop; 0 when the client went away).
func (c *Consoles) attach(ctx context.Context, id string, req runtime.ExecRequest) (int, error) {
	return answer(ctx)(c.sb.Run(ctx, id, service.Command{ExecRequest: req, KeepAlive: true, Code: true}))
}

// answer is a connection's answer of its run: the program's exit code,
// 0 when the client (ctx) went away.
func answer(ctx context.Context) func(service.Outcome, error) (int, error) {
	return func(o service.Outcome, err error) (int, error) {
		switch {
		case err == nil:
			return o.Code, nil
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return 0, nil // the client went away
		}
		return 0, err
	}
}
