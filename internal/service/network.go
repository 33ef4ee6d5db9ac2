package service

import (
	"context"
	"errors"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// networkPolicy checks a caller's egress policy: every entry valid (400)
// and within what the operator lets tenants ask for (403). It returns the
// canonical policy the sandbox gets: nil when none was asked for (no
// interface at all), an empty one when the policy allows nothing (an
// interface, closed).
func (s *Service) networkPolicy(p *netpolicy.Policy) (*netpolicy.Policy, error) {
	if p == nil {
		return nil, nil
	}
	r, err := netpolicy.Parse(p)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.KindInvalid, err, err.Error())
	}
	if err := s.cfg.network.Check(r); err != nil {
		return nil, sandbox.Wrap(sandbox.KindForbidden, err, err.Error())
	}
	// A backend that cannot enforce some rule (names, on Kubernetes) says
	// so before a row is written.
	if c := s.caps.CheckNetwork; c != nil {
		if err := c.CheckNetwork(r); err != nil {
			return nil, err
		}
	}
	if got := r.Policy(); got != nil {
		return got, nil
	}
	return &netpolicy.Policy{}, nil
}

// networkRules is the runtime's form of sb's policy: nil for a sandbox
// leased with no network (no interface at all), rules that may allow
// nothing for one leased with a network (its interface kept, closed). The
// stored policy is canonical, so it parses.
func networkRules(sb *sandbox.Sandbox) *netpolicy.Rules {
	if sb.Network == nil {
		return nil
	}
	r, err := netpolicy.Parse(sb.Network)
	if err != nil {
		return nil // unreachable for a stored policy; none is the safe side
	}
	return r
}

// SetNetwork replaces the egress policy of a live sandbox: at once when it
// runs (for new connections), at its wake when it sleeps. A sandbox leased
// with no network has no interface to open (409: lease it with one); one
// leased with a network can be closed (an empty policy, stored as {}) and
// opened again.
func (s *Service) SetNetwork(ctx context.Context, id string, p *netpolicy.Policy) (*sandbox.Sandbox, error) {
	if p == nil {
		p = &netpolicy.Policy{} // closed
	}
	got, err := s.networkPolicy(p)
	if err != nil {
		return nil, err
	}
	unlock := s.lockSandbox(ctx, id)
	defer unlock()
	sb, err := s.d.Store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Status != sandbox.StatusRunning && sb.Status != sandbox.StatusSleeping {
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox %s is %s: only a running or sleeping sandbox's network can change", sb.ID, sb.Status)
	}
	if sb.Network == nil && !got.None() {
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox %s was leased with no network, so it has no interface to open: lease a sandbox with a network policy (it can be narrowed to none and opened again)", sb.ID)
	}
	if sb.Status == sandbox.StatusRunning {
		if s.caps.Network == nil {
			return nil, s.unsupported(runtime.CapNetwork)
		}
		rules, _ := netpolicy.Parse(got) // nil parses to no rules: closed
		err := s.caps.Network.SetNetwork(ctx, sb.Name, rules)
		var se *sandbox.Error
		if errors.As(err, &se) {
			return nil, err // the backend said why, for the caller
		}
		if errors.Is(err, runtime.ErrNoNetwork) {
			return nil, sandbox.Wrap(sandbox.KindConflict, err, "sandbox "+sb.ID+" was leased with no network, so it has no interface to open")
		}
		if err != nil {
			return nil, sandbox.Wrap(sandbox.KindInternal, err, "the network policy could not be applied")
		}
	}
	if err := s.d.Store.SetNetwork(ctx, id, got); err != nil {
		return nil, err
	}
	return s.d.Store.Get(ctx, id)
}
