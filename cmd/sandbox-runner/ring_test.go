package main

import (
	"bytes"
	"testing"
)

func TestRingKeepsTheTail(t *testing.T) {
	r := newRing(10)
	r.write(1, []byte("hello "))
	r.write(2, []byte("world"))
	r.write(1, []byte("!!"))
	if r.end != 13 || r.start() != 3 {
		t.Fatalf("end %d start %d, want 13 and 3", r.end, r.start())
	}
	got, dropped := r.since(0)
	if dropped != 3 {
		t.Fatalf("dropped %d, want 3", dropped)
	}
	var all bytes.Buffer
	for _, c := range got {
		all.Write(c.data)
	}
	if all.String() != "lo world!!" || got[0].stream != 1 || got[1].stream != 2 || got[0].off != 3 {
		t.Fatalf("since(0) = %q %+v", all.String(), got)
	}
	got, dropped = r.since(8) // in the middle of "world"
	if dropped != 0 || len(got) != 2 || string(got[0].data) != "rld" || got[0].off != 8 {
		t.Fatalf("since(8) = %+v, dropped %d", got, dropped)
	}
	if got, _ := r.since(13); len(got) != 0 {
		t.Fatalf("since(end) = %+v, want nothing", got)
	}
	r.write(1, bytes.Repeat([]byte("x"), 25)) // bigger than the ring
	if r.start() != 28 || r.end != 38 {
		t.Fatalf("after a write over the cap: start %d end %d", r.start(), r.end)
	}
}

func TestRingHandsOutStableChunks(t *testing.T) {
	r := newRing(8)
	r.write(1, []byte("abcd"))
	got, _ := r.since(0)
	r.write(1, []byte("efghij")) // trims and appends in place
	if string(got[0].data) != "abcd" {
		t.Fatalf("a chunk handed out changed to %q", got[0].data)
	}
}
