package service

import (
	"context"
	"time"
)

// SetRecordTimeout makes the deadline of a start's record shorter than the
// start itself, which the test that pins its placement needs; it returns
// the undo.
func SetRecordTimeout(d time.Duration) func() {
	old := recordTimeout
	recordTimeout = d
	return func() { recordTimeout = old }
}

// MapSizes reports the sizes of the in-memory maps keyed by id or org.
func (s *Service) MapSizes() (locks, sandboxes, orgs int) {
	s.locksMu.Lock()
	locks = len(s.locks)
	s.locksMu.Unlock()
	sandboxes, orgs = s.cmds.sizes()
	return
}

// HoldLock takes the lock of sandbox id of ctx's org; it returns the undo.
func (s *Service) HoldLock(ctx context.Context, id string) func() { return s.lockSandbox(ctx, id) }
