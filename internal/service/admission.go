package service

import (
	"context"
	"errors"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Retry hints of the refusals that waiting helps.
const (
	retryAfterQuota   = 30 // a live sandbox ends, a lease expires
	retryAfterCommand = 2  // commands are short
	retryAfterHost    = 30
	// The cluster had no room for a sandbox: others end, or it grows.
	retryAfterCapacity = 10
)

// policy is org's quota policy: the server's under the operator's
// override.
func (s *Service) policy(ctx context.Context, org string) (quota.Policy, error) {
	if s.d.Quotas == nil {
		return s.cfg.Quota, nil
	}
	o, err := s.d.Quotas.OrgQuota(ctx, org)
	if err != nil {
		return quota.Policy{}, err
	}
	return s.cfg.Quota.Over(o), nil
}

// Policy is the quota policy in force for the caller's org.
func (s *Service) Policy(ctx context.Context) (quota.Policy, error) {
	_, p, err := s.callerPolicy(ctx)
	return p, err
}

// callerPolicy is the caller's org and its policy.
func (s *Service) callerPolicy(ctx context.Context) (string, quota.Policy, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return "", quota.Policy{}, err
	}
	p, err := s.policy(ctx, org)
	return org, p, err
}

// QuotaLines lists each quota of the caller's org with its use.
func (s *Service) QuotaLines(ctx context.Context) ([]quota.Line, error) {
	org, p, err := s.callerPolicy(ctx)
	if err != nil {
		return nil, err
	}
	u, _, err := s.d.Store.Use(ctx, "")
	if err != nil {
		return nil, err
	}
	u.Commands = s.cmds.orgCount(org)
	return quota.Lines(p, u), nil
}

// refusal turns a quota refusal into the caller's answer: 429 with a retry
// hint where waiting frees what it needs, 403 (quota_exceeded) where only a
// delete does. Anything else passes as is.
func refusal(err error) error {
	var ex *quota.Exceeded
	if !errors.As(err, &ex) {
		return err
	}
	if !ex.Waits() {
		return sandbox.Errorf(sandbox.KindQuota, "%s", ex.Error())
	}
	e := sandbox.Errorf(sandbox.KindLimit, "%s", ex.Error())
	e.RetryAfter = retryAfterQuota
	if ex.Quota == quota.NameCommands {
		e.RetryAfter = retryAfterCommand
	}
	return e
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
		return refusal(err)
	}
	return s.admitHost(ctx, c)
}

// Acquire takes one of the caller org's command slots for work that is not
// a program in a sandbox (an event-stream follower); release gives it back.
// A full quota is a 429.
func (s *Service) Acquire(ctx context.Context) (release func(), err error) {
	org, p, err := s.callerPolicy(ctx)
	if err != nil {
		return nil, err
	}
	release, n, ok := s.cmds.takeSlot(org, *p.Commands)
	if !ok {
		return nil, commandsFull(*p.Commands, n)
	}
	return release, nil
}

// commandsFull is the refusal of a command over its org's quota (429).
func commandsFull(limit, running int) error {
	return refusal(&quota.Exceeded{Quota: quota.NameCommands, Limit: float64(limit), Used: float64(running), Ask: 1})
}
