package narrate

import (
	"context"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"io"
	"sync"

	"github.com/sandboxd/sandbox/internal/redact"
)

// Appender is where a command's narration goes: the session logs of every
// org (*Log). Append must neither block nor fail and must not keep data:
// narration never slows or fails a command.
type Appender interface {
	Append(org, session, kind string, data []byte)
}

var _ Appender = (*Log)(nil)

// Command is one command's narration into one session of an org. It
// carries at most max bytes of output, like the command's answer; the rest
// is counted and said once.
type Command struct {
	a       Appender
	org     string
	session string
	secrets []string
	max     int

	mu        sync.Mutex
	sent      int
	truncated bool
}

// ForCaller is NewCommand for the org of the caller in ctx, or nil when
// there is nothing to narrate (no session, no appender, no caller).
func ForCaller(ctx context.Context, a Appender, session string, secrets []string, max int) *Command {
	if session == "" || a == nil {
		return nil
	}
	p, ok := sandbox.PrincipalFrom(ctx)
	if !ok {
		return nil
	}
	return NewCommand(a, p.Org, session, secrets, max)
}

// NewCommand narrates a command of org into session, redacting secrets from
// whole events (the streams are redacted upstream) and carrying at most max
// bytes of output.
func NewCommand(a Appender, org, session string, secrets []string, max int) *Command {
	return &Command{a: a, org: org, session: session, secrets: secrets, max: max}
}

// Event appends a whole message (the command line, the exit code), redacted.
func (c *Command) Event(kind, text string) {
	c.a.Append(c.org, c.session, kind, []byte(redact.String(text, c.secrets)))
}

// Writer appends what is written, as it is written, as events of kind
// (stdout, stderr).
func (c *Command) Writer(kind string) io.Writer { return commandWriter{c: c, kind: kind} }

type commandWriter struct {
	c    *Command
	kind string
}

func (w commandWriter) Write(p []byte) (int, error) {
	c := w.c
	c.mu.Lock()
	room := c.max - c.sent
	keep := p[:max(0, min(len(p), room))]
	c.sent += len(keep)
	cut := len(keep) < len(p) && !c.truncated
	if cut {
		c.truncated = true
	}
	c.mu.Unlock()
	if len(keep) > 0 {
		c.a.Append(c.org, c.session, w.kind, keep)
	}
	if cut {
		c.a.Append(c.org, c.session, "truncated", []byte("[sandbox: narration stops here; the command's further output is not narrated]"))
	}
	return len(p), nil
}
