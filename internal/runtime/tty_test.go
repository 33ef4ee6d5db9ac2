package runtime

import (
	"strings"
	"testing"
	"time"
)

// TestTTYInputsOrder: a size waiting when keys come goes before them,
// whichever the merge sees first; a size with a side of 0 is dropped; the
// sequence ends with the keys, or at stop without a stdin.
func TestTTYInputsOrder(t *testing.T) {
	for range 200 { // the merge's select picks at random among what is ready
		resize := make(chan Size, 2)
		stop := make(chan struct{})
		resize <- Size{Cols: 0, Rows: 9}
		resize <- Size{Cols: 99, Rows: 33}
		in := TTYInputs(strings.NewReader("ls\r"), resize, stop)
		var got []TTYInput
		for i := range in {
			got = append(got, i)
		}
		if len(got) != 2 || got[0].Keys != nil || got[0].Size != (Size{Cols: 99, Rows: 33}) || string(got[1].Keys) != "ls\r" {
			t.Fatalf("inputs %+v, want the size 99x33, then the keys", got)
		}
		close(stop)
	}
	stop := make(chan struct{})
	in := TTYInputs(nil, nil, stop)
	close(stop)
	select {
	case _, ok := <-in:
		if ok {
			t.Fatal("an input from nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the inputs of no stdin did not end at stop")
	}
}
