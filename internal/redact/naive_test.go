package redact

// The earlier implementation (a scan trying every secret at every byte),
// kept as the oracle the matcher is fuzzed against: the same output for any
// input, secrets and chunking.

import (
	"bytes"
	"io"
	"slices"
)

// naiveWriter redacts what passes through it into the next writer. Close flushes
// the held-back tail (it does not close the next writer). A naiveWriter is not
// safe for concurrent use.
type naiveWriter struct {
	next    io.Writer
	secrets [][]byte // longest first, so a longer secret wins over its prefix
	pending []byte
	err     error
}

// newNaive returns a naiveWriter for secrets; empty secrets are ignored. With
// no secrets it still works, as a plain pass-through.
func newNaive(next io.Writer, secrets []string) *naiveWriter {
	w := &naiveWriter{next: next}
	for _, s := range secrets {
		if s != "" {
			w.secrets = append(w.secrets, []byte(s))
		}
	}
	slices.SortFunc(w.secrets, func(a, b []byte) int { return len(b) - len(a) })
	return w
}

// Write redacts p and passes on everything that can no longer be part of a
// secret. It always reports len(p): a failing next writer is remembered and
// reported by Close, so the producer is never slowed or failed by it.
func (w *naiveWriter) Write(p []byte) (int, error) {
	if len(w.secrets) == 0 {
		w.emit(p)
		return len(p), nil
	}
	w.scan(append(w.pending, p...), false)
	return len(p), nil
}

// scan redacts buf, emits what is settled and keeps the rest pending. At
// the end of the stream (final) nothing can be completed any more, so
// nothing is held back.
func (w *naiveWriter) scan(buf []byte, final bool) {
	out := make([]byte, 0, len(buf))
	i := 0
scan:
	for i < len(buf) {
		rest := buf[i:]
		// Hold back first: a shorter secret matching now must not win over
		// a longer one that the next write may complete.
		for _, s := range w.secrets {
			if !final && len(rest) < len(s) && bytes.HasPrefix(s, rest) {
				break scan
			}
		}
		for _, s := range w.secrets {
			if bytes.HasPrefix(rest, s) {
				out = append(out, Mask...)
				i += len(s)
				continue scan
			}
		}
		out = append(out, buf[i])
		i++
	}
	w.pending = append(w.pending[:0:0], buf[i:]...)
	w.emit(out)
}

// Close redacts and passes on the held-back tail: the stream ended, so
// nothing in it can grow into a secret any more.
func (w *naiveWriter) Close() error {
	if len(w.pending) > 0 {
		w.scan(w.pending, true)
	}
	return w.err
}

func (w *naiveWriter) emit(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	_, w.err = w.next.Write(p)
}

// String redacts a whole string at once.
func naiveString(s string, secrets []string) string {
	var b bytes.Buffer
	w := newNaive(&b, secrets)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}
