package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// transition is THE status change of a sandbox. It refuses a move the
// domain's table does not allow (sandbox.CheckTransition), writes it only if
// the row is still in sb.Status (the store's compare-and-set: a racing call
// that moved it first makes this one a KindConflict and writes nothing),
// moves the live gauge (running sandboxes by class), and updates sb.
//
// next holds the fields the move writes: the status and the runtime object
// (name, identity), checkpoint and error reason that go with it.
func (s *Service) transition(ctx context.Context, sb *sandbox.Sandbox, next sandbox.Sandbox) error {
	from, to := sb.Status, next.Status
	if err := sandbox.CheckTransition(from, to); err != nil {
		return fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	switch err := s.d.Store.Transition(ctx, sb.ID, from, &next); {
	case errors.Is(err, store.ErrStale):
		return sandbox.Wrap(sandbox.KindConflict, err, fmt.Sprintf("sandbox %s changed meanwhile; try again", sb.ID))
	case err != nil:
		return err
	}
	switch {
	case from != sandbox.StatusRunning && to == sandbox.StatusRunning:
		s.d.Metrics.Live(sb.Class, 1)
	case from == sandbox.StatusRunning && to != sandbox.StatusRunning:
		s.d.Metrics.Live(sb.Class, -1)
	}
	sb.Status, sb.Name, sb.UID, sb.Checkpoint, sb.Error = to, next.Name, next.UID, next.Checkpoint, next.Error
	sb.MemoryKept = sb.Checkpoint != ""
	return nil
}

// moved returns the fields of sb changed to status to, for transition.
func moved(sb *sandbox.Sandbox, to sandbox.Status) sandbox.Sandbox {
	return sandbox.Sandbox{Status: to, Name: sb.Name, UID: sb.UID, Checkpoint: sb.Checkpoint, Error: sb.Error}
}
