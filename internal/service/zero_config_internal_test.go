package service

import (
	"flag"
	"reflect"
	"testing"
)

// TestZeroConfigIsTheFlagDefaults: a zero Config behaves as the flags'
// defaults do (server.New(Config{}) is sandbox serve with no flags).
func TestZeroConfigIsTheFlagDefaults(t *testing.T) {
	var flagged Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	flagged.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got, want := (Config{}).withDefaults(), flagged.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("a zero Config:\n%+v\nthe flags' defaults:\n%+v", got, want)
	}
}
