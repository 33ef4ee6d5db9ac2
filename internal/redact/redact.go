// Package redact replaces secrets in a byte stream with "[redacted]" as the
// stream passes, including a secret split across two writes: the writer holds
// back the shortest tail that could still begin a secret, and no more; its
// cost per byte does not grow with the secrets' lengths.
package redact

import (
	"bytes"
	"io"
	"slices"
)

// Mask is what a secret becomes.
const Mask = "[redacted]"

// MaxSecrets and MaxSecretLen bound what a caller may ask to redact: the
// work per byte grows with both.
const (
	MaxSecrets   = 32
	MaxSecretLen = 4096
)

// Writer redacts what passes through it into the next writer. Close flushes
// the held-back tail (it does not close the next writer). A Writer is not
// safe for concurrent use.
//
// Matching is one pass of an Aho-Corasick automaton over the secrets: the
// work per byte is bounded by the number of secrets ending there (at most
// MaxSecrets), whatever the secrets' lengths or the output's shape, so no
// choice of secrets can make a command's output cost a core. At each
// position the longest secret starting there wins and matches do not
// overlap, left to right: a position is settled once no secret can still
// start there (the automaton's depth says how far back one could).
type Writer struct {
	next io.Writer
	m    *matcher
	err  error

	state   int32
	base    int64   // the stream position of pending[0]
	end     int64   // the stream position of the next byte
	pending []byte  // bytes not yet settled
	best    []int32 // per pending byte: the longest secret starting there
}

// NewWriter returns a Writer for secrets; empty secrets are ignored. With
// no secrets it still works, as a plain pass-through.
func NewWriter(next io.Writer, secrets []string) *Writer {
	return &Writer{next: next, m: newMatcher(secrets)}
}

// Write redacts p and passes on everything that can no longer be part of a
// secret. It always reports len(p): a failing next writer is remembered and
// reported by Close, so the producer is never slowed or failed by it.
func (w *Writer) Write(p []byte) (int, error) {
	if w.m == nil {
		w.emit(p)
		return len(p), nil
	}
	out := make([]byte, 0, len(p)+len(w.pending))
	for _, c := range p {
		w.pending = append(w.pending, c)
		w.best = append(w.best, 0)
		w.state = w.m.step(w.state, c)
		for _, l := range w.m.lens[w.state] {
			if i := w.end - int64(l) + 1 - w.base; i >= 0 && w.best[i] < l {
				w.best[i] = l
			}
		}
		w.end++
		// What the state remembers of text before the first pending byte
		// (inside a mask, or already passed on) can start no secret any
		// more: drop it, then settle every position where no secret can
		// still be growing — which may settle more.
		for {
			for int64(w.m.depth[w.state]) > w.end-w.base {
				w.state = w.m.fail[w.state]
			}
			before := w.base
			out = w.settle(out, w.end-int64(w.m.grow[w.state]))
			if w.base == before {
				break
			}
		}
	}
	w.emit(out)
	return len(p), nil
}

// settle passes on (or masks) the pending bytes before stream position
// upto, where no secret can start any more.
func (w *Writer) settle(out []byte, upto int64) []byte {
	k := 0
	for w.base+int64(k) < upto && k < len(w.pending) {
		if l := w.best[k]; l > 0 {
			out = append(out, Mask...)
			k += int(l)
			continue
		}
		out = append(out, w.pending[k])
		k++
	}
	if k > 0 {
		// A mask may reach past upto (its bytes were all seen): what it
		// covered is gone too.
		k = min(k, len(w.pending))
		w.base += int64(k)
		w.pending = append(w.pending[:0], w.pending[k:]...)
		w.best = append(w.best[:0], w.best[k:]...)
	}
	return out
}

// Close redacts and passes on the held-back tail: the stream ended, so
// nothing in it can grow into a secret any more.
func (w *Writer) Close() error {
	if w.m != nil && len(w.pending) > 0 {
		w.emit(w.settle(nil, w.end))
	}
	return w.err
}

func (w *Writer) emit(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	_, w.err = w.next.Write(p)
}

// matcher is the Aho-Corasick automaton of a set of secrets: a trie whose
// nodes know their depth, their failure link and the lengths of the
// secrets that end there (their own and their suffixes').
type matcher struct {
	edges [][]edge
	fail  []int32
	depth []int32
	lens  [][]int32
	// grow is the length of the longest suffix of a node's string that a
	// longer secret could still continue (a node with children on its
	// failure chain): the text before it is settled.
	grow []int32
}

type edge struct {
	c    byte
	next int32
}

func (m *matcher) child(n int32, c byte) int32 {
	for _, e := range m.edges[n] {
		if e.c == c {
			return e.next
		}
	}
	return -1
}

func newMatcher(secrets []string) *matcher {
	m := &matcher{edges: [][]edge{nil}, fail: []int32{0}, depth: []int32{0}, lens: [][]int32{nil}, grow: []int32{0}}
	n := 0
	for _, s := range secrets {
		if s == "" {
			continue
		}
		n++
		cur := int32(0)
		for i := 0; i < len(s); i++ {
			next := m.child(cur, s[i])
			if next < 0 {
				next = int32(len(m.edges))
				m.edges = append(m.edges, nil)
				m.fail = append(m.fail, 0)
				m.depth = append(m.depth, m.depth[cur]+1)
				m.lens = append(m.lens, nil)
				m.grow = append(m.grow, 0)
				m.edges[cur] = append(m.edges[cur], edge{s[i], next})
			}
			cur = next
		}
		if !slices.Contains(m.lens[cur], int32(len(s))) {
			m.lens[cur] = append(m.lens[cur], int32(len(s)))
		}
	}
	if n == 0 {
		return nil
	}
	// Breadth first: a node's failure link is the longest proper suffix of
	// its string that is in the trie; it inherits that node's secrets.
	queue := []int32{}
	for _, e := range m.edges[0] {
		queue = append(queue, e.next)
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		m.lens[n] = append(m.lens[n], m.lens[m.fail[n]]...)
		if len(m.edges[n]) > 0 {
			m.grow[n] = m.depth[n]
		} else {
			m.grow[n] = m.grow[m.fail[n]]
		}
		for _, e := range m.edges[n] {
			f := m.fail[n]
			for f != 0 && m.child(f, e.c) < 0 {
				f = m.fail[f]
			}
			if g := m.child(f, e.c); g >= 0 && g != e.next {
				m.fail[e.next] = g
			}
			queue = append(queue, e.next)
		}
	}
	return m
}

// step moves from state n on byte c (amortised constant: each failure
// step is paid for by an earlier forward step).
func (m *matcher) step(n int32, c byte) int32 {
	for {
		if next := m.child(n, c); next >= 0 {
			return next
		}
		if n == 0 {
			return 0
		}
		n = m.fail[n]
	}
}

// String redacts a whole string at once.
func String(s string, secrets []string) string {
	var b bytes.Buffer
	w := NewWriter(&b, secrets)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}
