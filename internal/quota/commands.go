package quota

import (
	"context"
	"errors"
	"sync"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Retry hints of the refusals that waiting helps, in seconds.
const (
	RetryAfterQuota   = 30 // a live sandbox ends, a lease expires
	RetryAfterCommand = 2  // commands are short
)

// Refusal turns a quota refusal (*Exceeded) into the caller's answer:
// sandbox.KindLimit (429) with a retry hint where waiting frees what it
// needs, sandbox.KindQuota (403, quota_exceeded) where only a delete does.
// Anything else passes as is.
func Refusal(err error) error {
	var ex *Exceeded
	if !errors.As(err, &ex) {
		return err
	}
	if !ex.Waits() {
		return sandbox.Errorf(sandbox.KindQuota, "%s", ex.Error())
	}
	e := sandbox.Errorf(sandbox.KindLimit, "%s", ex.Error())
	e.RetryAfter = RetryAfterQuota
	if ex.Quota == NameCommands {
		e.RetryAfter = RetryAfterCommand
	}
	return e
}

// Overrides are the operator's per-org overrides of the server's policy.
type Overrides interface {
	OrgQuota(ctx context.Context, org string) (Policy, error)
}

// InForce is org's policy: the server's (its nil fields Default's) under
// the operator's override of org; nil overrides are none. Admission and the
// org's quota report both ask it, so they cannot disagree.
func InForce(ctx context.Context, server Policy, overrides Overrides, org string) (Policy, error) {
	p := Default().Over(server)
	if overrides == nil {
		return p, nil
	}
	o, err := overrides.OrgQuota(ctx, org)
	if err != nil {
		return Policy{}, err
	}
	return p.Over(o), nil
}

// Commands counts each org's running commands: the use of its commands
// quota. Every command of the org takes from the one count — a program
// in a sandbox (the service's work in flight) and work that runs none (an
// event-stream follower) — so the server makes one and hands it to both.
// It lives in memory on purpose: a command does not outlive the server
// process that runs it; the map holds only orgs with commands running.
type Commands struct {
	mu  sync.Mutex
	org map[string]int
}

// Take counts one more of org's commands unless limit run already: then
// it is refused (KindLimit, 429, with a retry hint) and nothing is
// counted. release gives the slot back; calling it again does nothing.
func (c *Commands) Take(org string, limit int) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.org == nil {
		c.org = map[string]int{}
	}
	if n := c.org[org]; n >= limit {
		return nil, Refusal(&Exceeded{Quota: NameCommands, Limit: float64(limit), Used: float64(n), Ask: 1})
	}
	c.org[org]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.org[org]--; c.org[org] <= 0 {
				delete(c.org, org)
			}
		})
	}, nil
}

// Running is how many of org's commands run.
func (c *Commands) Running(org string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.org[org]
}

// Orgs is how many orgs have commands running (the size of the count, for
// the test that it does not grow).
func (c *Commands) Orgs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.org)
}
