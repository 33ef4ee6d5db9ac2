package service

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/ticket"
)

// TicketResult is a minted ticket.
type TicketResult struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expiresIn"`
	URL       string `json:"url"`
}

// Ticket mints a single-use ticket for the terminal or the screen (kind)
// of a sandbox of the caller's org. A sleeping sandbox is woken first; one
// that cannot run, or a screen of a class without a display, is a 409.
func (s *Service) Ticket(ctx context.Context, id, kind string) (string, error) {
	p, ok := sandbox.PrincipalFrom(ctx)
	if !ok {
		return "", sandbox.Errorf(sandbox.KindUnauthorized, "no principal")
	}
	sb, _, done, err := s.use(ctx, id)
	if err != nil {
		return "", err
	}
	done()
	if kind == ticket.Screen {
		if c, err := sandbox.LookupClass(sb.Class); err != nil || !c.Display {
			return "", sandbox.Errorf(sandbox.KindConflict, "sandbox %s is class %s, which has no screen: lease class desktop", sb.ID, sb.Class)
		}
	}
	token, _, ok := s.tickets.Mint(p.Org, sb.ID, kind)
	if !ok {
		return "", &sandbox.Error{Kind: sandbox.KindLimit, Msg: "too many unspent tickets: use or let expire the ones you hold", RetryAfter: int(ticket.TTL / time.Second)}
	}
	return token, nil
}

// SpendTicket spends a ticket (before checking it) and answers what it
// grants: the context of its org, for a connection to sandbox id.
func (s *Service) SpendTicket(ctx context.Context, token, id, kind string) (context.Context, error) {
	t, ok := s.tickets.Spend(token, id, kind)
	if !ok {
		return nil, sandbox.Errorf(sandbox.KindUnauthorized, "the ticket is missing, expired, already used, or for another %s: mint a new one with POST .../%s/ticket", kind, kind)
	}
	return sandbox.WithPrincipal(ctx, sandbox.Principal{Org: t.Org, Subject: "ticket"}), nil
}

// keepAlive is how often a connected terminal or screen marks its sandbox
// used and pushes its lease out, and by how much.
const (
	keepAliveEvery = 30 * time.Second
	keepAliveTTL   = 10 * time.Minute
)

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
func (s *Service) Terminal(ctx context.Context, id, arg string, stdin io.Reader, stdout io.Writer, resize <-chan runtime.Size) (int, error) {
	if arg != "" {
		if err := sandbox.CheckSessionName("arg", arg); err != nil {
			return 0, err
		}
	}
	argv := []string{"sh", "-c", shellScript, "sh"}
	if arg != "" {
		argv = append(argv, arg)
	}
	return s.attach(ctx, id, runtime.ExecRequest{Argv: argv, TTY: true, Stdin: stdin, Stdout: stdout, Resize: resize})
}

// displayScript starts the desktop's display once (Xvfb, a window manager,
// a terminal, and a VNC server on 127.0.0.1:5900 only), then relays the
// VNC port over stdin/stdout. A sandbox woken from sleep may have lost its
// display; this brings it back. Failures are said on stderr.
const displayScript = `export DISPLAY=:0
if ! pgrep -x Xvfb >/dev/null 2>&1; then
  mkdir -p -m 1777 /tmp/.X11-unix # Xvfb makes it only as root
  setsid Xvfb :0 -screen 0 1280x800x24 -nolisten tcp >/tmp/.xvfb.log 2>&1 < /dev/null &
  for i in $(seq 50); do [ -e /tmp/.X11-unix/X0 ] && break; sleep 0.1; done
  setsid openbox >/dev/null 2>&1 < /dev/null &
  setsid xterm >/dev/null 2>&1 < /dev/null &
fi
if ! pgrep -x x11vnc >/dev/null 2>&1; then
  setsid x11vnc -display :0 -localhost -rfbport 5900 -forever -shared -nopw -quiet >/tmp/.x11vnc.log 2>&1 < /dev/null &
fi
for i in $(seq 100); do
  if socat -u OPEN:/dev/null TCP:127.0.0.1:5900 2>/dev/null; then exec socat - TCP:127.0.0.1:5900; fi
  sleep 0.1
done
echo "the display did not start: $(tail -n 3 /tmp/.xvfb.log /tmp/.x11vnc.log 2>/dev/null)" >&2
exit 1`

// Screen relays the desktop's VNC server (RFB bytes, untranslated: no tty)
// of sandbox id until either side closes. Like a terminal it keeps the
// sandbox in use.
func (s *Service) Screen(ctx context.Context, id string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return s.attach(ctx, id, runtime.ExecRequest{Argv: []string{"sh", "-c", displayScript}, Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// attach runs an interactive exec with the keep-alive of a connection.
func (s *Service) attach(ctx context.Context, id string, req runtime.ExecRequest) (int, error) {
	sb, workCtx, done, err := s.use(ctx, id)
	if err != nil {
		return 0, err
	}
	defer done()
	if req.Dir == "" {
		req.Dir = sb.Workdir
	}
	stopKeep := make(chan struct{})
	defer close(stopKeep)
	go s.keepAlive(context.WithoutCancel(ctx), sb, stopKeep)
	err = s.rt.Exec(workCtx, sb.Name, req)
	s.touch(ctx, sb)
	var exit *runtime.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	case errors.Is(context.Cause(workCtx), errStopped):
		return 137, nil
	case ctx.Err() != nil:
		return 0, nil // the client went away
	}
	return 0, s.died(ctx, sb, err)
}

// keepAlive marks sb used and extends its lease (never past the ceiling)
// until stop closes.
func (s *Service) keepAlive(ctx context.Context, sb *sandbox.Sandbox, stop <-chan struct{}) {
	class, err := sandbox.LookupClass(sb.Class)
	if err != nil {
		return
	}
	extend := func() {
		s.touch(ctx, sb)
		exp := sandbox.ExpiryFor(class, int64(keepAliveTTL/time.Second), s.now(), sb.CreatedAt, s.cfg.Ceiling)
		cur, err := s.store.Get(ctx, sb.ID)
		if err != nil || !exp.After(cur.ExpiresAt) {
			return
		}
		if err := s.store.SetExpiry(ctx, sb.ID, exp); err != nil {
			s.log.Warn("extending the lease of a connected sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	extend()
	t := time.NewTicker(keepAliveEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			extend()
		}
	}
}
