package service_test

import (
	"reflect"
	"testing"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

func withNetwork(allow ...string) option {
	return func(c *service.Config, _ *service.Deps) { c.NetworkAllow = allow }
}

// The operator's bounds decide what a lease may ask for; the answer (and
// the runtime's spec) carry what the sandbox got, canonical.
func TestLeaseNetworkPolicy(t *testing.T) {
	closed := newHarness(t)
	_, err := closed.svc.Lease(acme, service.LeaseRequest{Network: &netpolicy.Policy{Allow: []string{"pypi.org"}}})
	if sandbox.KindOf(err) != sandbox.KindForbidden {
		t.Fatalf("a policy on a server that allows none = %v, want forbidden", err)
	}

	h := newHarness(t, withNetwork("*.example.com", "pypi.org", "203.0.113.0/24"))
	for _, bad := range []*netpolicy.Policy{
		{Allow: []string{"github.com"}},
		{Allow: []string{"internet"}},
		{Allow: []string{"198.51.100.0/24"}},
	} {
		if _, err := h.svc.Lease(acme, service.LeaseRequest{Network: bad}); sandbox.KindOf(err) != sandbox.KindForbidden {
			t.Errorf("lease with %v = %v, want forbidden", bad.Allow, err)
		}
	}
	if _, err := h.svc.Lease(acme, service.LeaseRequest{Network: &netpolicy.Policy{Allow: []string{"a..b"}}}); sandbox.KindOf(err) != sandbox.KindInvalid {
		t.Errorf("a malformed entry = %v, want invalid", err)
	}
	if n := len(h.rows(acme)); n != 0 {
		t.Fatalf("refused leases left %d rows", n)
	}

	sb, err := h.svc.Lease(acme, service.LeaseRequest{Network: &netpolicy.Policy{Allow: []string{"PyPI.org", "api.example.com", "203.0.113.7"}, Ports: []int{443}}})
	if err != nil {
		t.Fatal(err)
	}
	want := &netpolicy.Policy{Allow: []string{"pypi.org", "api.example.com", "203.0.113.7"}, Ports: []int{443}}
	if !reflect.DeepEqual(sb.Network, want) || !reflect.DeepEqual(sb.Object().Network, want) {
		t.Fatalf("got network %+v, want %+v", sb.Network, want)
	}
	spec, _ := h.rt.Spec(sb.Name)
	if spec.Network == nil || !spec.Network.NameAllowed("api.example.com") || spec.Network.NameAllowed("example.com") {
		t.Fatalf("runtime spec network = %+v", spec.Network)
	}
	got, err := h.svc.Get(acme, sb.ID)
	if err != nil || !reflect.DeepEqual(got.Network, want) {
		t.Fatalf("stored network = %+v, %v", got.Network, err)
	}

	// Closed, then opened again: the interface stays.
	if got, err = h.svc.SetNetwork(acme, sb.ID, &netpolicy.Policy{}); err != nil || got.Network == nil || !got.Network.None() {
		t.Fatalf("closing = %+v, %v", got, err)
	}
	if spec, _ = h.rt.Spec(sb.Name); spec.Network == nil || spec.Network.NameAllowed("pypi.org") {
		t.Fatalf("closed spec network = %+v", spec.Network)
	}
	if got, err = h.svc.SetNetwork(acme, sb.ID, &netpolicy.Policy{Allow: []string{"pypi.org"}}); err != nil || len(got.Network.Allow) != 1 {
		t.Fatalf("opening = %+v, %v", got, err)
	}
	if _, err := h.svc.SetNetwork(acme, sb.ID, &netpolicy.Policy{Allow: []string{"internet"}}); sandbox.KindOf(err) != sandbox.KindForbidden {
		t.Errorf("SetNetwork beyond the bounds = %v, want forbidden", err)
	}
	if _, err := h.svc.SetNetwork(orgCtx("other"), sb.ID, &netpolicy.Policy{}); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("another org's SetNetwork = %v, want not found", err)
	}

	plain, err := h.svc.Lease(acme, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Network != nil {
		t.Fatalf("a lease with no network got %+v", plain.Network)
	}
	if _, err := h.svc.SetNetwork(acme, plain.ID, &netpolicy.Policy{Allow: []string{"pypi.org"}}); sandbox.KindOf(err) != sandbox.KindConflict {
		t.Errorf("opening a sandbox leased with no network = %v, want conflict", err)
	}
}
