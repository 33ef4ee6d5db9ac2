package service_test

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// TestAbsentCapabilities: what a backend lacks is answered from one place
// (501, "this server's fake backend cannot …"), after the sandbox is found
// (another org's id is still a 404) where a sandbox is named first, and
// leaves nothing behind. (Snapshots without a Differ: the kube suite.)
func TestAbsentCapabilities(t *testing.T) {
	h := newHarness(t, without(runtime.CapFork, runtime.CapDiff, runtime.CapNetwork, runtime.CapRunner), func(_ *service.Config, d *service.Deps) {
		d.RuntimeName = "fake"
	})
	sb := h.lease(acme, service.LeaseRequest{Network: &netpolicy.Policy{}})
	for name, call := range map[string]func(id string) error{
		"fork":    func(id string) error { _, err := h.svc.Fork(acme, id, service.ForkRequest{}); return err },
		"network": func(id string) error { _, err := h.svc.SetNetwork(acme, id, &netpolicy.Policy{}); return err },
	} {
		err := call(sb.ID)
		if sandbox.KindOf(err) != sandbox.KindUnsupported || !strings.HasPrefix(err.Error(), "this server's fake backend cannot ") {
			t.Errorf("%s without its capability: %v", name, err)
		}
		if err := call("sb_" + strings.Repeat("z", 26)); sandbox.KindOf(err) != sandbox.KindNotFound {
			t.Errorf("%s of a missing sandbox: %v, want not found first", name, err)
		}
	}
	if n := len(h.rows(acme)); n != 1 || len(h.rt.Objects()) != 1 {
		t.Errorf("after the refusals: %d rows, objects %v", n, h.rt.Objects())
	}
}
