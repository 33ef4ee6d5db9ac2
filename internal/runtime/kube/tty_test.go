package kube

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// TestTTYFramesOrder: a terminal's frames are the header, then a size
// that was waiting before keys ahead of them, keys as they come; they end
// when the keys end, or at stop without a stdin.
func TestTTYFramesOrder(t *testing.T) {
	pr, pw := io.Pipe()
	sizes := make(chan runtime.Size, 4)
	f := newTTYFrames(context.Background(), []byte("HEAD"), pr, sizes)
	next := func(want string) {
		t.Helper()
		b := make([]byte, len(want))
		if _, err := io.ReadFull(f, b); err != nil || string(b) != want {
			t.Fatalf("frames %q (%v), want %q", b, err, want)
		}
	}
	next("HEAD")
	sizes <- runtime.Size{Cols: 99, Rows: 33}
	go pw.Write([]byte("ls\r"))
	time.Sleep(50 * time.Millisecond)
	next("r\x00\x63\x00\x21" + "d\x00\x00\x00\x03ls\r")
	// Keys, with sizes waiting before them (one no size: dropped).
	sizes <- runtime.Size{Cols: 0, Rows: 5}
	sizes <- runtime.Size{Cols: 80, Rows: 24}
	go func() { pw.Write([]byte("x")); pw.Close() }()
	next("r\x00\x50\x00\x18" + "d\x00\x00\x00\x01x")
	if n, err := f.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the keys ended: %d, %v; want EOF", n, err)
	}

	got := make(chan []byte)
	f = newTTYFrames(context.Background(), nil, nil, nil)
	go func() {
		b, _ := io.ReadAll(f)
		got <- b
	}()
	f.stop()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the frames of no stdin did not end at stop")
	}
}
