package flagx_test

import (
	"flag"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/flagx"
)

func TestOffFlags(t *testing.T) {
	var n int64 = 512
	var d = time.Hour
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.Var(flagx.Int64Off(&n), "n", "")
	fs.Var(flagx.DurationOff(&d), "d", "")
	if err := fs.Parse([]string{"-n", "0", "-d", "0"}); err != nil || n != flagx.Off || d != flagx.Off {
		t.Fatalf("0: %d %v %v", n, d, err)
	}
	if s := fs.Lookup("n").Value.String() + " " + fs.Lookup("d").Value.String(); s != "0 0s" {
		t.Errorf("shown as %q", s)
	}
	if err := fs.Parse([]string{"-n", "7", "-d", "90s"}); err != nil || n != 7 || d != 90*time.Second {
		t.Fatalf("set: %d %v %v", n, d, err)
	}
	for _, bad := range [][]string{{"-n", "-1"}, {"-n", "x"}, {"-d", "-1s"}, {"-d", "7"}} {
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		fs.SetOutput(new(nopWriter))
		fs.Var(flagx.Int64Off(&n), "n", "")
		fs.Var(flagx.DurationOff(&d), "d", "")
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
