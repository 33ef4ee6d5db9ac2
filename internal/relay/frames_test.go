package relay

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// writes records each Write as it came.
type writes struct {
	io.ReadWriteCloser
	got [][]byte
}

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, append([]byte(nil), p...))
	return len(p), nil
}

func header(typ byte, length uint32) []byte {
	h := make([]byte, headerLen)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:], 7)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// TestFramesJoin: a data frame's header and body leave as one write; a
// window update, a ping and the hello pass through alone; a body past
// maxJoined is written on its own behind its header; the bytes written are
// the bytes given, in order.
func TestFramesJoin(t *testing.T) {
	w := &writes{}
	f := newFrames(w)
	big := bytes.Repeat([]byte("x"), maxJoined+1)
	in := [][]byte{
		[]byte(hello),
		header(0, 5), []byte("hello"),
		header(1, 0), // a window update (SYN, ACK, FIN)
		header(2, 0), // a ping
		header(0, 0), // a data header with no body: not held
		header(0, uint32(len(big))), big,
		header(0, 3), []byte("end"),
	}
	var want []byte
	for _, p := range in {
		if n, err := f.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
		}
		want = append(want, p...)
	}
	if got := bytes.Join(w.got, nil); !bytes.Equal(got, want) {
		t.Fatalf("the bytes written differ from the bytes given")
	}
	lens := []int{len(hello), headerLen + 5, headerLen, headerLen, headerLen, headerLen, len(big), headerLen + 3}
	if len(w.got) != len(lens) {
		t.Fatalf("%d writes, want %d", len(w.got), len(lens))
	}
	for i, n := range lens {
		if len(w.got[i]) != n {
			t.Errorf("write %d: %d bytes, want %d", i, len(w.got[i]), n)
		}
	}
}

// TestGuardReadsFrames: the guard counts ping requests (not answers, not
// bytes of a data body that look like one, however the reads split the
// frames), and refuses a stream the runner opens past the bound.
func TestGuardReadsFrames(t *testing.T) {
	ping := func(flags uint16) []byte {
		h := header(2, 0)
		binary.BigEndian.PutUint16(h[2:], flags)
		return h
	}
	var wire []byte
	for range maxPings {
		wire = append(wire, ping(1)...)
		wire = append(wire, ping(2)...) // an answer
		body := bytes.Repeat(ping(1), 100)
		wire = append(append(wire, header(0, uint32(len(body)))...), body...)
	}
	for _, step := range []int{1, 5, 12, 13, 4096} {
		g := guard{}
		for rest := wire; len(rest) > 0; {
			n := min(step, len(rest))
			if err := g.scan(rest[:n]); err != nil {
				t.Fatalf("reads of %d: %v after %d bytes", step, err, len(wire)-len(rest))
			}
			rest = rest[n:]
		}
		if err := g.scan(ping(1)); err == nil {
			t.Errorf("reads of %d: ping %d passed", step, maxPings+1)
		}
	}
	open := 0
	g := guard{streams: func() int { return open }}
	syn := header(1, 0)
	binary.BigEndian.PutUint16(syn[2:], 1)
	open = maxStreams - 1
	if err := g.scan(syn); err != nil {
		t.Fatalf("a stream under the bound: %v", err)
	}
	open = maxStreams
	if err := g.scan(syn); err == nil {
		t.Error("a stream past the bound passed")
	}
}

// FuzzGuard: the guard reads any bytes without panicking, and how the
// reads split them changes nothing: the same bytes in one read or in
// reads of any size are refused alike.
func FuzzGuard(f *testing.F) {
	ping := header(2, 0)
	binary.BigEndian.PutUint16(ping[2:], 1)
	f.Add(bytes.Repeat(ping, maxPings+1), 5)
	f.Add(append(header(0, 24), bytes.Repeat(ping, 2)...), 7)
	f.Add([]byte{0, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, step int) {
		if step <= 0 || step > len(b) {
			step = max(len(b), 1)
		}
		open := maxStreams - 2
		whole := guard{streams: func() int { return open }}
		errWhole := whole.scan(b)
		split := guard{streams: func() int { return open }}
		var errSplit error
		for rest := b; len(rest) > 0 && errSplit == nil; {
			n := min(step, len(rest))
			errSplit = split.scan(rest[:n])
			rest = rest[n:]
		}
		if (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("one read: %v; reads of %d: %v", errWhole, step, errSplit)
		}
	})
}
