package identity

import (
	"context"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Rows reads a sandbox's row of the org in ctx (the store).
type Rows interface {
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
}

// RowLeases are Leases read from the orgs' rows: when a lease ends is a
// fact of its row (sandbox.LeaseEnd), so the issuer and the verifier ask
// the store, not the service.
type RowLeases struct {
	Rows Rows
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

var _ Leases = RowLeases{}

// LeaseEnd is when sandbox id of org stops being leased; an unknown,
// ended, failed or expired sandbox is KindNotFound.
func (l RowLeases) LeaseEnd(ctx context.Context, org, id string) (time.Time, error) {
	if !sandbox.ValidID(id) {
		return time.Time{}, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "credential"})
	sb, err := l.Rows.Get(octx, id)
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	return sb.LeaseEnd(now)
}
