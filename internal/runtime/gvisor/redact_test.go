package gvisor

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedactorAcrossWrites(t *testing.T) {
	name := "sbx-abcdefghijklmnopqrstuvwxy"
	in := "error in " + name + ": boom; again " + name + "\nand a near miss sbx-abc."
	for split := 1; split < len(in); split++ {
		var out bytes.Buffer
		r := &redactor{w: &out, old: []byte(name), new: []byte("sandbox")}
		for i := 0; i < len(in); i += split {
			r.Write([]byte(in[i:min(i+split, len(in))]))
		}
		r.flush()
		want := strings.ReplaceAll(in, name, "sandbox")
		if out.String() != want {
			t.Fatalf("split %d: %q, want %q", split, out.String(), want)
		}
	}
}
