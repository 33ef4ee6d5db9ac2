package service

import (
	"context"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Retry hints of the refusals that waiting helps (the quotas' are
// quota.RetryAfter*).
const (
	retryAfterHost = 30
	// The cluster had no room for a sandbox: others end, or it grows.
	retryAfterCapacity = 10
)

// policy is org's quota policy: the server's under the operator's
// override (quota.InForce, which the org's quota report asks too).
func (s *Service) policy(ctx context.Context, org string) (quota.Policy, error) {
	return quota.InForce(ctx, s.cfg.Quota, s.d.Quotas, org)
}

// admitHost refuses a start (503 with a retry hint) when the machine lacks
// the headroom for it: the class's memory limit plus the memory reserve, or
// the disk reserve. A headroom that cannot be read admits (and is logged):
// the quotas still bound every org.
func (s *Service) admitHost(ctx context.Context, c sandbox.Class) error {
	if s.d.Host == nil || s.cfg.ReserveMemoryMiB <= 0 && s.cfg.ReserveDiskMiB <= 0 {
		return nil
	}
	mem, disk, err := s.d.Host.Headroom(ctx)
	if err != nil {
		s.log.Warn("reading the host's headroom; admitting", "err", err)
		return nil
	}
	short := ""
	switch {
	case s.cfg.ReserveMemoryMiB > 0 && mem-c.Limits.MemoryMiB < s.cfg.ReserveMemoryMiB:
		short = "memory"
	case s.cfg.ReserveDiskMiB > 0 && disk < s.cfg.ReserveDiskMiB:
		short = "disk space"
	}
	if short == "" {
		return nil
	}
	// The numbers are the operator's; the tenant hears what and when.
	s.log.Warn("admission: host short of "+short, "class", c.Name, "availableMemoryMiB", mem, "freeDiskMiB", disk,
		"needMemoryMiB", c.Limits.MemoryMiB, "reserveMemoryMiB", s.cfg.ReserveMemoryMiB, "reserveDiskMiB", s.cfg.ReserveDiskMiB)
	e := sandbox.Errorf(sandbox.KindUnavailable, "the server is short of %s for a %s sandbox right now; try again later", short, c.Name)
	e.RetryAfter = retryAfterHost
	return e
}

// admitStart checks a wake of sb against its org's CPU and memory quotas
// and the host's headroom.
func (s *Service) admitStart(ctx context.Context, sb *sandbox.Sandbox) error {
	c, err := sandbox.LookupClass(sb.Class)
	if err != nil {
		return err
	}
	p, err := s.policy(ctx, sb.Org)
	if err != nil {
		return err
	}
	u, _, err := s.d.Store.Use(ctx, "")
	if err != nil {
		return err
	}
	if err := quota.Check(p, u, quota.Ask{Class: c.Name, Start: true}); err != nil {
		return quota.Refusal(err)
	}
	return s.admitHost(ctx, c)
}
