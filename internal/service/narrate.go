package service

import (
	"context"
	"io"

	"github.com/sandboxd/sandbox/internal/redact"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Narrator appends to the live log of a named session of an org. Append
// must neither block nor fail and must not keep data: narration never slows
// or fails a command.
type Narrator interface {
	Append(org, session, kind string, data []byte)
}

// narration is one command's narration into one session.
type narration struct {
	n       Narrator
	org     string
	session string
	secrets []string
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
	w.n.n.Append(w.n.org, w.n.session, w.kind, p)
	return len(p), nil
}
