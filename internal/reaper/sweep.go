package reaper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Runtime is what the sweep needs of the backend.
type Runtime interface {
	List(ctx context.Context, selector map[string]string) ([]runtime.Object, error)
	Delete(ctx context.Context, ref runtime.Ref) error
}

// DefaultGrace is how old an unclaimed runtime object must be before the
// sweep deletes it: longer than any start or wake takes between creating
// the object and recording its name.
const DefaultGrace = 5 * time.Minute

// Sweep deletes the runtime objects that carry the sandbox label but that no
// row of any org claims, once they are older than the grace period. Each is
// deleted by name AND identity, never by a selector. If any org's store
// cannot be read, nothing at all is deleted: an unreadable store claims
// nothing, so every one of its sandboxes would look like an orphan.
func (r *Reaper) Sweep(ctx context.Context) (deleted int, err error) {
	now := r.clock()
	grace := r.withDefaults().Grace
	objs, err := r.Runtime.List(ctx, map[string]string{runtime.LabelSandbox: ""})
	if err != nil {
		return 0, fmt.Errorf("sweep: listing runtime objects: %w", err)
	}
	// What the server holds with no row yet is asked BEFORE the rows are
	// read: one it lets go of after (a warm sandbox whose lease just
	// wrote its row) is claimed by a row the read finds.
	objs = slices.DeleteFunc(objs, func(o runtime.Object) bool { return r.Keep != nil && r.Keep(o.Name) })
	if len(objs) == 0 {
		return 0, nil
	}
	orgs, err := r.Store.Orgs(ctx)
	if err != nil {
		return 0, fmt.Errorf("sweep: listing orgs: %w", err)
	}
	claimed := map[string]bool{}
	for _, org := range orgs {
		octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "sweep"})
		rows, err := r.Store.List(octx, store.Filter{Limit: 1 << 30})
		if err != nil {
			return 0, fmt.Errorf("sweep: a store is unreadable, deleting nothing: %w", err)
		}
		for _, sb := range rows {
			claimed[sb.Name] = true
		}
	}
	var errs []error
	for _, o := range objs {
		if claimed[o.Name] || now().Sub(o.Created) < grace {
			continue
		}
		err := r.Runtime.Delete(ctx, runtime.Ref{Name: o.Name, UID: o.UID})
		switch {
		case err == nil:
			deleted++
			r.Log.Info("sweep: deleted an orphan", "name", o.Name, "sandbox", o.Labels[runtime.LabelSandbox])
		case errors.Is(err, runtime.ErrNotFound), errors.Is(err, runtime.ErrConflict):
			// Gone, or the name is someone else's now: stop, never retry.
		default:
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}
