// Package usage is an org's own report of what it uses: the quota policy
// in force for it, each quota with its use, and its lease-seconds by
// class; and a command slot for work that runs no program (an
// event-stream follower), counted with its commands. Admission — whether
// a lease, a wake or a command may start — is the service's; this package
// only reads, on narrow interfaces of the store and the one count of
// commands (quota.Commands) the service shares.
package usage

import (
	"context"
	"time"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Store is the part of the store the report reads; every call is scoped
// to the org in ctx.
type Store interface {
	// Use is the org's use of its quotas (commands aside).
	Use(ctx context.Context, project string) (quota.Use, bool, error)
	// Usage is what the org's ended leases recorded.
	Usage(ctx context.Context) ([]store.Usage, error)
	List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error)
}

// Report reads an org's use.
type Report struct {
	policy    quota.Policy
	overrides quota.Overrides
	st        Store
	cmds      *quota.Commands
	now       func() time.Time
}

// New reports on st's orgs under the server's policy (nil fields
// quota.Default's) and the operator's overrides (nil: none); cmds is the
// count of commands the service takes from.
func New(policy quota.Policy, overrides quota.Overrides, st Store, cmds *quota.Commands) *Report {
	return &Report{policy: policy, overrides: overrides, st: st, cmds: cmds, now: time.Now}
}

// Policy is the quota policy in force for the caller's org.
func (r *Report) Policy(ctx context.Context) (quota.Policy, error) {
	_, p, err := r.callerPolicy(ctx)
	return p, err
}

func (r *Report) callerPolicy(ctx context.Context) (string, quota.Policy, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return "", quota.Policy{}, err
	}
	p, err := quota.InForce(ctx, r.policy, r.overrides, org)
	return org, p, err
}

// QuotaLines lists each quota of the caller's org with its use.
func (r *Report) QuotaLines(ctx context.Context) ([]quota.Line, error) {
	org, p, err := r.callerPolicy(ctx)
	if err != nil {
		return nil, err
	}
	u, _, err := r.st.Use(ctx, "")
	if err != nil {
		return nil, err
	}
	u.Commands = r.cmds.Running(org)
	return quota.Lines(p, u), nil
}

// Acquire takes one of the caller org's command slots for work that is
// not a program in a sandbox (an event-stream follower); release gives it
// back. A full quota is a 429 (quota.Refusal).
func (r *Report) Acquire(ctx context.Context) (release func(), err error) {
	org, p, err := r.callerPolicy(ctx)
	if err != nil {
		return nil, err
	}
	return r.cmds.Take(org, *p.Commands)
}

// Usage returns the caller org's lease count and lease-seconds by class:
// what ended leases recorded, plus the time live leases have run so far.
func (r *Report) Usage(ctx context.Context) ([]store.Usage, error) {
	recorded, err := r.st.Usage(ctx)
	if err != nil {
		return nil, err
	}
	live, err := r.st.List(ctx, store.Filter{Status: sandbox.StatusRunning, Limit: 100000})
	if err != nil {
		return nil, err
	}
	byClass := map[string]store.Usage{}
	for _, u := range recorded {
		byClass[u.Class] = u
	}
	now := r.now().UTC()
	for _, sb := range live {
		u := byClass[sb.Class]
		u.Class = sb.Class
		u.LeaseSeconds += now.Sub(sb.CreatedAt).Seconds()
		byClass[sb.Class] = u
	}
	out := make([]store.Usage, 0, len(byClass))
	for _, c := range sandbox.ClassNames() {
		if u, ok := byClass[c]; ok {
			out = append(out, u)
		}
	}
	return out, nil
}
