// Package flagxtest checks a part's configuration against the flags'
// convention (package flagx): for tests only.
package flagxtest

import (
	"flag"
	"reflect"
	"testing"
)

// ZeroIsDefault fails t unless a zero C, with defaults applied, is what
// register's flags give with none set: server.New(Config{}) then behaves
// as `sandbox serve` with no flags.
func ZeroIsDefault[C any](t *testing.T, register func(*C, *flag.FlagSet), defaults func(C) C) {
	t.Helper()
	var flagged, zero C
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	register(&flagged, fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got, want := defaults(zero), defaults(flagged); !reflect.DeepEqual(got, want) {
		t.Errorf("a zero Config:\n%+v\nthe flags' defaults:\n%+v", got, want)
	}
}
