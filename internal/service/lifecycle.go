package service

import (
	"context"
	"errors"
	"sync"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// lock serialises sleep, wake and end of one sandbox.
func (s *Service) lock(id string) func() {
	s.locksMu.Lock()
	if s.locks == nil {
		s.locks = map[string]*sync.Mutex{}
	}
	mu := s.locks[id]
	if mu == nil {
		mu = &sync.Mutex{}
		s.locks[id] = mu
	}
	s.locksMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// forget drops the lock of an ended sandbox.
func (s *Service) forget(id string) {
	s.locksMu.Lock()
	delete(s.locks, id)
	s.locksMu.Unlock()
}

// use opens a piece of work on a sandbox of the caller's org: it registers
// the work (so Stop can cancel it and Sleep backs off), wakes the sandbox if
// it sleeps, requires it to run, and stamps its last use. The returned
// context is cancelled by Stop; done must be called when the work ends.
//
// The work is registered BEFORE the row is read. A sleep marks the row
// sleeping before it counts the work in flight, so either the sleep sees
// this work and backs off, or this read sees "sleeping" and wakes.
func (s *Service) use(ctx context.Context, id string) (*sandbox.Sandbox, context.Context, func(), error) {
	if !sandbox.ValidID(id) {
		return nil, nil, nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	wctx, done := s.cmds.start(ctx, id)
	sb, err := s.store.Get(ctx, id)
	if err == nil && sb.Status == sandbox.StatusSleeping {
		sb, err = s.wake(ctx, id)
	}
	if err == nil && sb.Status != sandbox.StatusRunning {
		err = notRunning(sb)
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	s.touch(ctx, sb)
	return sb, wctx, done, nil
}

// Resume wakes a sleeping sandbox now; a running one is answered as is.
func (s *Service) Resume(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, _, done, err := s.use(ctx, id)
	if err != nil {
		return nil, err
	}
	done()
	return sb, nil
}

// wake starts a sleeping sandbox again under a new runtime name, restoring
// its memory when it was checkpointed (and starting it fresh, files intact,
// when the restore fails).
func (s *Service) wake(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	unlock := s.lock(id)
	defer unlock()
	sb, err := s.store.Get(ctx, id)
	if err != nil || sb.Status != sandbox.StatusSleeping {
		return sb, err // someone else woke (or ended) it meanwhile
	}
	log := s.log.With("sandbox", sb.ID)
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
	defer cancel()
	sb.Name = sandbox.NewName()
	obj, err := s.rt.Create(startCtx, s.spec(sb, sb.Checkpoint))
	if err != nil && sb.Checkpoint != "" {
		log.Warn("restoring the checkpoint failed; starting fresh with the files kept", "err", err)
		sb.Name = sandbox.NewName()
		obj, err = s.rt.Create(startCtx, s.spec(sb, ""))
		sb.MemoryKept = false
	}
	if err != nil {
		log.Error("waking sandbox", "err", err)
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be woken; try again")
	}
	if err := s.store.SetRuntime(startCtx, sb.ID, sandbox.StatusRunning, sb.Name, obj.UID, ""); err != nil {
		if derr := s.rt.Delete(startCtx, runtime.Ref{Name: obj.Name, UID: obj.UID}); derr != nil {
			log.Error("removing a container whose row could not be updated", "err", derr)
		}
		return nil, err
	}
	if sb.Checkpoint != "" {
		if err := s.rt.DropCheckpoint(startCtx, sb.Checkpoint); err != nil {
			log.Warn("dropping a used checkpoint", "err", err)
		}
	}
	sb.Status, sb.UID, sb.Checkpoint, sb.Woken = sandbox.StatusRunning, obj.UID, "", true
	s.cfg.Metrics.Live(sb.Class, 1)
	log.Info("sandbox woken", "memoryKept", sb.MemoryKept)
	return sb, nil
}

// Sleep puts a running sandbox to sleep now: its memory is checkpointed
// where the runtime can, its container removed; its row, volume and project
// stay. Work in flight keeps it awake (409). A sleeping sandbox is answered
// as is.
func (s *Service) Sleep(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.SleepIf(ctx, id, nil)
}

// SleepIf is Sleep with a guard evaluated on the current row under the
// sandbox's lock; when it says no, nothing happens and the result is nil.
func (s *Service) SleepIf(ctx context.Context, id string, guard func(*sandbox.Sandbox) bool) (*sandbox.Sandbox, error) {
	if !sandbox.ValidID(id) {
		return nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	unlock := s.lock(id)
	defer unlock()
	sb, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if guard != nil && !guard(sb) {
		return nil, nil
	}
	switch sb.Status {
	case sandbox.StatusSleeping:
		return sb, nil
	case sandbox.StatusRunning:
	default:
		return nil, notRunning(sb)
	}
	ctx = context.WithoutCancel(ctx)
	log := s.log.With("sandbox", sb.ID)
	if err := s.store.SetRuntime(ctx, sb.ID, sandbox.StatusSleeping, sb.Name, sb.UID, ""); err != nil {
		return nil, err
	}
	if n := s.cmds.count(sb.ID); n > 0 {
		if err := s.store.SetRuntime(ctx, sb.ID, sandbox.StatusRunning, sb.Name, sb.UID, ""); err != nil {
			return nil, err
		}
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox %s has %d commands running: stop them first", sb.ID, n)
	}
	ref := runtime.Ref{Name: sb.Name, UID: sb.UID}
	key := sb.ID
	if err := s.rt.Checkpoint(ctx, ref, key); err != nil {
		if !errors.Is(err, runtime.ErrUnsupported) {
			log.Warn("checkpoint failed; sleeping without memory", "err", err)
		}
		key = ""
		if err := s.rt.Delete(ctx, ref); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			log.Error("removing the container of a sleeping sandbox", "err", err)
			if rerr := s.store.SetRuntime(ctx, sb.ID, sandbox.StatusRunning, sb.Name, sb.UID, ""); rerr != nil {
				log.Error("restoring the row", "err", rerr)
			}
			return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be put to sleep; try again")
		}
	}
	if err := s.store.SetRuntime(ctx, sb.ID, sandbox.StatusSleeping, sb.Name, sb.UID, key); err != nil {
		return nil, err
	}
	sb.Status, sb.Checkpoint, sb.MemoryKept = sandbox.StatusSleeping, key, key != ""
	s.cfg.Metrics.Live(sb.Class, -1)
	log.Info("sandbox sleeping", "memoryKept", sb.MemoryKept)
	return sb, nil
}

// died handles a broken channel: if the sandbox's container is really gone
// (gVisor takes the whole sandbox down when the host's memory cgroup kills
// it), the sandbox is put to sleep without memory, so that its files stay
// and the next call starts it again, and the answer says so. It returns the
// error to answer with.
func (s *Service) died(ctx context.Context, sb *sandbox.Sandbox, cause error) error {
	ctx = context.WithoutCancel(ctx)
	msg := "the channel to the sandbox broke; the sandbox may have died"
	obj, err := s.rt.Status(ctx, sb.Name)
	if err == nil && obj.Running {
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	unlock := s.lock(sb.ID)
	defer unlock()
	cur, err := s.store.Get(ctx, sb.ID)
	if err != nil || cur.Status != sandbox.StatusRunning || cur.Name != sb.Name {
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	if err := s.rt.Delete(ctx, runtime.Ref{Name: cur.Name, UID: cur.UID}); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		s.log.Error("clearing a dead sandbox", "sandbox", sb.ID, "err", err)
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	if err := s.store.SetRuntime(ctx, cur.ID, sandbox.StatusSleeping, cur.Name, cur.UID, ""); err != nil {
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	s.cfg.Metrics.Live(cur.Class, -1)
	s.log.Warn("sandbox died; it sleeps and starts again on its next use", "sandbox", sb.ID, "err", cause)
	return sandbox.Wrap(sandbox.KindBadGateway, cause, "the sandbox died (it may have run out of memory); its files are kept and the next call starts it again")
}
