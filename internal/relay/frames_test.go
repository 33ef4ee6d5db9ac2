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
