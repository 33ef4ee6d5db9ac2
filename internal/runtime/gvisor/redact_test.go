package gvisor

import (
	"bytes"
	"context"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestStartTurns: MaxStarts bounds the starts under way; one more waits
// until a turn is given back, or its context ends; the flag's 0 (stored
// negative) is no bound, the zero value the default.
func TestStartTurns(t *testing.T) {
	r := &Runtime{starts: make(chan struct{}, (Options{MaxStarts: 2}).maxStarts())}
	a, _ := r.startTurn(t.Context())
	b, _ := r.startTurn(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.startTurn(ctx); err == nil {
		t.Fatal("a third start went ahead of a bound of two")
	}
	got := make(chan func(), 1)
	go func() { c, _ := r.startTurn(t.Context()); got <- c }()
	a()
	(<-got)()
	b()
	if (Options{MaxStarts: -1}).maxStarts() != 0 || (Options{}).maxStarts() != int(DefaultMaxStarts) || DefaultMaxStarts < 2 {
		t.Error("the bound's defaults")
	}
	none := &Runtime{}
	if release, err := none.startTurn(ctx); err != nil {
		t.Error(err)
	} else {
		release()
	}
}

func TestStartsFlag(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if d := fs.Lookup("max-starts").DefValue; d != "auto" || o.MaxStarts != 0 {
		t.Errorf("default %q, stored %d", d, o.MaxStarts)
	}
	for in, want := range map[string]int{"3": 3, "0": 0, "auto": int(DefaultMaxStarts)} {
		if err := fs.Set("max-starts", in); err != nil || o.maxStarts() != want {
			t.Errorf("--max-starts %s: %d %v", in, o.maxStarts(), err)
		}
	}
	if fs.Set("max-starts", "-1") == nil || fs.Set("max-starts", "many") == nil {
		t.Error("a bad --max-starts was taken")
	}
}

// TestSystrapFastPathFlag: systrap's fast path is off unless
// --systrap-fast-path; the flag is systrap's alone.
func TestSystrapFastPathFlag(t *testing.T) {
	for _, c := range []struct {
		platform string
		fast     bool
		want     bool // --systrap-disable-fast-path given
	}{{"systrap", false, true}, {"systrap", true, false}, {"ptrace", false, false}} {
		r := &Runtime{cfg: Config{Options: Options{Platform: c.platform, SystrapFastPath: c.fast}}}
		if got := slices.Contains(r.globalFlags(0, false), "--systrap-disable-fast-path"); got != c.want {
			t.Errorf("%s, fast path %v: --systrap-disable-fast-path given %v", c.platform, c.fast, got)
		}
	}
	var o Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if fs.Set("systrap-fast-path", "true") != nil || !o.SystrapFastPath {
		t.Error("--systrap-fast-path is not taken")
	}
}
