package service

import (
	"context"
	"io"
	"sync"

	"github.com/sandboxd/sandbox/internal/redact"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Narrator appends to the live log of a named session of an org. Append
// must neither block nor fail and must not keep data: narration never slows
// or fails a command.
type Narrator interface {
	Append(org, session, kind string, data []byte)
}

// narration is one command's narration into one session. It carries at
// most OutputCap bytes of output, like the answer; the rest is counted and
// said once.
type narration struct {
	n       Narrator
	org     string
	session string
	secrets []string

	mu        sync.Mutex
	sent      int
	truncated bool
}

// narration returns the narration of a command for session, or nil when
// there is none to make.
func (s *Service) narration(ctx context.Context, session string, secrets []string) *narration {
	if session == "" || s.cfg.Narrator == nil {
		return nil
	}
	p, ok := sandbox.PrincipalFrom(ctx)
	if !ok {
		return nil
	}
	return &narration{n: s.cfg.Narrator, org: p.Org, session: session, secrets: secrets}
}

// event appends a whole message (the command line, the exit code), redacted.
func (n *narration) event(kind, text string) {
	n.n.Append(n.org, n.session, kind, []byte(redact.String(text, n.secrets)))
}

// writer appends what is written as it is written; the stream is already
// redacted upstream.
func (n *narration) writer(kind string) io.Writer {
	return narrationWriter{n: n, kind: kind}
}

type narrationWriter struct {
	n    *narration
	kind string
}

func (w narrationWriter) Write(p []byte) (int, error) {
	n := w.n
	n.mu.Lock()
	room := OutputCap - n.sent
	keep := p[:max(0, min(len(p), room))]
	n.sent += len(keep)
	cut := len(keep) < len(p) && !n.truncated
	if cut {
		n.truncated = true
	}
	n.mu.Unlock()
	if len(keep) > 0 {
		n.n.Append(n.org, n.session, w.kind, keep)
	}
	if cut {
		n.n.Append(n.org, n.session, "truncated", []byte("[sandbox: narration stops here; the command's further output is not narrated]"))
	}
	return len(p), nil
}
