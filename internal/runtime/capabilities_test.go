package runtime_test

import (
	"slices"
	"testing"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
)

// TestCapabilities: Discover finds what a backend has (the fake has every
// capability), Without takes some away, and Names lists what is left in
// order; the server hands these names to the API (GET /v1/info).
func TestCapabilities(t *testing.T) {
	all := runtime.Discover(fake.New())
	if n := all.Names(); len(n) < 2 {
		t.Fatalf("the fake's capabilities: %v", n)
	}
	c := all.Without(runtime.CapFork, runtime.CapDiff, runtime.CapNetwork, runtime.CapRunner)
	if got := c.Names(); !slices.Equal(got, []runtime.Capability{runtime.CapCheckpoint, runtime.CapStats}) {
		t.Errorf("without fork, diff, network and runner: %v", got)
	}
	if c.Runner != nil || c.Fork != nil || c.Stats == nil {
		t.Errorf("Without left %+v", c)
	}
}
