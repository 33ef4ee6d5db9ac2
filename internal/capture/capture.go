// Package capture is the bounded buffer a command's output is kept in: the
// first bytes written, a count of the rest, so that a program's flood
// neither grows the server's memory nor blocks the program. Every part that
// runs something in a sandbox and keeps what it said (the service's exec,
// the processes' starts, the files' and the credential's helper commands,
// the interpreter, a screen's relay) keeps it in one of these.
package capture

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// Buffer keeps the first max bytes written to it and counts the rest.
// It is safe for concurrent use (a program's stdout and stderr may share
// one).
type Buffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	dropped int64
}

// New returns a Buffer that keeps max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

// Write keeps what fits and counts the rest; it never fails, so the
// writer is never blocked or stopped by a full buffer.
func (c *Buffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := max(c.max-c.buf.Len(), 0)
	kept := min(room, len(p))
	c.buf.Write(p[:kept])
	c.dropped += int64(len(p) - kept)
	return len(p), nil
}

// Note appends the server's own line, past the cap.
func (c *Buffer) Note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.WriteString(s)
}

// Bytes are the bytes kept, without the truncation note; a copy.
func (c *Buffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

// String is the bytes kept and, when some were dropped, a line saying how
// many.
func (c *Buffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped > 0 {
		return c.buf.String() + fmt.Sprintf("\n[sandbox: output truncated, %d more bytes dropped]\n", c.dropped)
	}
	return c.buf.String()
}

var _ io.Writer = (*Buffer)(nil)
