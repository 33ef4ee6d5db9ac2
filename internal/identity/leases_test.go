package identity_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// rows are one org's sandboxes by id.
type rows map[string]map[string]*sandbox.Sandbox

func (r rows) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	if sb, ok := r[org][id]; ok {
		return sb, nil
	}
	return nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
}

// TestRowLeases: a lease's end is read from the org's own row; another
// org's id, a malformed id, and a lease past its expiry are not found.
func TestRowLeases(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	live, old := sandbox.NewID(), sandbox.NewID()
	l := identity.RowLeases{Now: func() time.Time { return now }, Rows: rows{"acme": {
		live: {ID: live, Status: sandbox.StatusRunning, ExpiresAt: now.Add(time.Hour)},
		old:  {ID: old, Status: sandbox.StatusSleeping, ExpiresAt: now.Add(-time.Hour)},
	}}}
	if end, err := l.LeaseEnd(context.Background(), "acme", live); err != nil || !end.Equal(now.Add(time.Hour)) {
		t.Errorf("live: %v %v", end, err)
	}
	for _, c := range []struct{ org, id string }{{"globex", live}, {"acme", old}, {"acme", "nope"}} {
		if _, err := l.LeaseEnd(context.Background(), c.org, c.id); sandbox.KindOf(err) != sandbox.KindNotFound {
			t.Errorf("%s %s: %v, want not found", c.org, c.id, err)
		}
	}
}
