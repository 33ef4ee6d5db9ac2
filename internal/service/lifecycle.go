package service

import (
	"context"
	"errors"
	"github.com/sandboxd/sandbox/wire"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// idLock is the lock of one sandbox id, and how many hold or wait for it.
type idLock struct {
	sync.Mutex
	refs int
}

// lock serialises sleep, wake and end of one sandbox. The entry lives only
// while someone holds or waits for it, so ids that are unknown or another
// org's (a flood of ends on made-up ids) leave nothing behind.
// lockSandbox is the lock of sandbox id of the caller's org, keyed by
// both: a caller of another org naming the id (its answer a 404) neither
// waits on the owner's steps nor delays them.
func (s *Service) lockSandbox(ctx context.Context, id string) func() {
	p, _ := sandbox.PrincipalFrom(ctx)
	return s.lock("sandbox\x00" + p.Org + "\x00" + id)
}

func (s *Service) lock(id string) func() {
	s.locksMu.Lock()
	if s.locks == nil {
		s.locks = map[string]*idLock{}
	}
	l := s.locks[id]
	if l == nil {
		l = &idLock{}
		s.locks[id] = l
	}
	l.refs++
	s.locksMu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		s.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, id)
		}
		s.locksMu.Unlock()
	}
}

func notFound() error { return sandbox.Errorf(sandbox.KindNotFound, "sandbox not found") }

func notRunning(sb *sandbox.Sandbox) error {
	if sb.Status == sandbox.StatusPending {
		return sandbox.Errorf(sandbox.KindConflict, "sandbox %s is still starting; try again in a moment", sb.ID)
	}
	return sandbox.Errorf(sandbox.KindConflict, "sandbox %s is %s, not running", sb.ID, sb.Status)
}

// use opens a piece of work on a sandbox of the caller's org: it registers
// the work (so Stop can cancel it and Sleep backs off), wakes the sandbox if
// it sleeps, requires it to run, and stamps its last use. The returned
// context is cancelled by Stop; done must be called when the work ends.
//
// The work is registered BEFORE the row is read. A sleep marks the row
// sleeping before it counts the work in flight, so either the sleep sees
// this work and backs off, or this read sees "sleeping" and wakes.
//
// A command (exec, a file operation, a run, a connection) counts against
// its org's commands quota; a refusal (429) registers nothing.
func (s *Service) use(ctx context.Context, id string, command bool) (*sandbox.Sandbox, context.Context, func(), error) {
	if !sandbox.ValidID(id) {
		return nil, nil, nil, notFound()
	}
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	limit := -1
	if command {
		p, err := s.policy(ctx, org)
		if err != nil {
			return nil, nil, nil, err
		}
		limit = *p.Commands
	}
	wctx, done, err := s.cmds.start(ctx, org, id, limit)
	if err != nil {
		return nil, nil, nil, err
	}
	sb, err := s.d.Store.Get(ctx, id)
	if err == nil && sb.Status == sandbox.StatusSleeping {
		sb, err = s.wake(ctx, id)
	}
	if err == nil && sb.Status != sandbox.StatusRunning {
		err = notRunning(sb)
	}
	if err == nil {
		// No program runs before the sandbox's credential is in place.
		err = s.d.Credentials.Wait(ctx, id)
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	s.touch(ctx, sb)
	return sb, wctx, done, nil
}

func (s *Service) touch(ctx context.Context, sb *sandbox.Sandbox) {
	// At most one write a second: a page's many preview requests, or a
	// loop of commands, would each cost a write for a stamp that the
	// idle sleep reads in minutes and the API shows in seconds.
	if d := s.now().Sub(sb.LastUsedAt); d >= 0 && d < time.Second {
		return
	}
	now := s.now()
	if err := s.d.Store.Touch(context.WithoutCancel(ctx), sb.ID, now); err != nil {
		s.log.Warn("stamping last use", "sandbox", sb.ID, "err", err)
		return
	}
	sb.LastUsedAt = now // a command's end, right after its start, writes no second stamp
}

// Renew extends a lease by ttlSec from now (class default when <= 0), never
// past the ceiling counted from creation. A sleeping sandbox is woken.
func (s *Service) Renew(ctx context.Context, id string, ttlSec int64) (*sandbox.Sandbox, error) {
	sb, _, done, err := s.use(ctx, id, false)
	if err != nil {
		return nil, err
	}
	defer done()
	class, err := sandbox.LookupClass(sb.Class)
	if err != nil {
		return nil, err
	}
	sb.ExpiresAt = sandbox.ExpiryFor(class, ttlSec, s.now(), sb.CreatedAt, s.cfg.Ceiling)
	if err := s.d.Store.SetExpiry(ctx, sb.ID, sb.ExpiresAt); err != nil {
		return nil, err
	}
	// The credential follows the lease: a new one, to the new end, for
	// the renewer's token.
	s.d.Credentials.Hand(ctx, sb, false)
	return sb, nil
}

// SetMetadata replaces a sandbox's metadata (it does not wake a sleeping
// one: labels are the record's, not the container's).
func (s *Service) SetMetadata(ctx context.Context, id string, m map[string]string) (*sandbox.Sandbox, error) {
	if err := sandbox.CheckMetadata(m); err != nil {
		return nil, err
	}
	if err := s.d.Store.SetMetadata(ctx, id, m); err != nil {
		return nil, err
	}
	return s.d.Store.Get(ctx, id)
}

// Wake wakes a sleeping sandbox now; a running one is answered as is.
// (The routes /pause and /resume are wire aliases of /sleep and /wake.)
func (s *Service) Wake(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, _, done, err := s.use(ctx, id, false)
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
	unlock := s.lockSandbox(ctx, id)
	defer unlock()
	sb, err := s.d.Store.Get(ctx, id)
	if err != nil || sb.Status != sandbox.StatusSleeping {
		return sb, err // someone else woke (or ended) it meanwhile
	}
	log := s.log.With("sandbox", sb.ID)
	if err := s.admitStart(ctx, sb); err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
	defer cancel()
	used := sb.Checkpoint // dropped once the sandbox runs again
	next := moved(sb, sandbox.StatusRunning)
	next.Name, next.Checkpoint = sandbox.NewName(), ""
	spec := s.spec(sb, used)
	spec.Name = next.Name
	obj, err := s.d.Runtime.Create(startCtx, spec)
	restored := used != "" && err == nil
	if err != nil && used != "" {
		log.Warn("restoring the checkpoint failed; starting fresh with the files kept", "err", err)
		next.Name = sandbox.NewName()
		spec.Name, spec.Restore = next.Name, ""
		obj, err = s.d.Runtime.Create(startCtx, spec)
	}
	if err != nil {
		log.Error("waking sandbox", "err", err)
		says, room := clusterSays(err)
		switch {
		case room:
			e := sandbox.Wrap(sandbox.KindUnavailable, err, "the cluster cannot place the sandbox now: "+says+"; it sleeps on, retry later")
			e.RetryAfter = retryAfterCapacity
			return nil, e
		case says != "":
			return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be woken: the cluster says: "+says+"; try again")
		}
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be woken; try again")
	}
	next.UID = obj.UID
	if err := s.transition(startCtx, sb, next); err != nil {
		if derr := s.d.Runtime.Delete(startCtx, runtime.Ref{Name: obj.Name, UID: obj.UID}); derr != nil {
			log.Error("removing a container whose row could not be updated", "err", derr)
		}
		return nil, err
	}
	if used != "" && s.caps.Checkpoint != nil {
		if err := s.caps.Checkpoint.DropCheckpoint(startCtx, used); err != nil {
			log.Warn("dropping a used checkpoint", "err", err)
		}
	}
	// The answer says whether the memory came back.
	sb.Woken, sb.MemoryKept = true, restored
	s.d.Credentials.Rewrite(startCtx, sb)
	log.Info("sandbox woken", "memoryKept", restored)
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
		return nil, notFound()
	}
	if guard != nil {
		// A background process is use: the idle sleep leaves its sandbox
		// awake (an explicit sleep freezes it; it runs on after the wake).
		if sb, err := s.d.Store.Get(ctx, id); err == nil && sb.Status == sandbox.StatusRunning && s.procs != nil && s.procs.Running(ctx, sb) {
			s.touch(ctx, sb)
			return nil, nil
		}
	}
	unlock := s.lockSandbox(ctx, id)
	defer unlock()
	// Another org's id is a 404 before anything waits on the sandbox.
	if _, err := s.d.Store.Get(ctx, id); err != nil {
		return nil, err
	}
	// A checkpoint taken mid-write would keep half a credential.
	if err := s.d.Credentials.Wait(ctx, id); err != nil {
		return nil, err
	}
	sb, err := s.d.Store.Get(ctx, id)
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
	// Marked first, counted after: see use.
	if err := s.transition(ctx, sb, moved(sb, sandbox.StatusSleeping)); err != nil {
		return nil, err
	}
	if n := s.cmds.count(sb.Org, sb.ID); n > 0 {
		if err := s.transition(ctx, sb, moved(sb, sandbox.StatusRunning)); err != nil {
			return nil, err
		}
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox %s has %d commands running: stop them first", sb.ID, n)
	}
	// A channel held open (a preview relay) would be checkpointed half
	// way through its exec: it is closed first, and opened again on use.
	s.cmds.release(sb.ID, 10*time.Second)
	ref := runtime.Ref{Name: sb.Name, UID: sb.UID}
	key := sb.ID
	err = errors.ErrUnsupported // no Checkpointer: the memory goes
	if s.caps.Checkpoint != nil {
		err = s.caps.Checkpoint.Checkpoint(ctx, ref, key)
	}
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			log.Warn("checkpoint failed; sleeping without memory", "err", err)
		}
		key = ""
		if err := s.d.Runtime.Delete(ctx, ref); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			log.Error("removing the container of a sleeping sandbox", "err", err)
			if rerr := s.transition(ctx, sb, moved(sb, sandbox.StatusRunning)); rerr != nil {
				log.Error("restoring the row", "err", rerr)
			}
			return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be put to sleep; try again")
		}
	}
	next := moved(sb, sandbox.StatusSleeping)
	next.Checkpoint = key
	if err := s.transition(ctx, sb, next); err != nil {
		return nil, err
	}
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
	obj, err := s.d.Runtime.Status(ctx, sb.Name)
	// Only a container known to be gone is: a backend that could not say
	// (an API server's 429 or 5xx, the very trouble that breaks a channel)
	// leaves it be, or a pod and its scratch files would go for nothing.
	if err == nil && obj.Running || err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	unlock := s.lockSandbox(ctx, sb.ID)
	defer unlock()
	cur, err := s.d.Store.Get(ctx, sb.ID)
	if err != nil || cur.Status != sandbox.StatusRunning || cur.Name != sb.Name {
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	if err := s.d.Runtime.Delete(ctx, runtime.Ref{Name: cur.Name, UID: cur.UID}); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		s.log.Error("clearing a dead sandbox", "sandbox", sb.ID, "err", err)
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	next := moved(cur, sandbox.StatusSleeping)
	next.Checkpoint = ""
	if err := s.transition(ctx, cur, next); err != nil {
		return sandbox.Wrap(sandbox.KindBadGateway, cause, msg)
	}
	s.log.Warn("sandbox died; it sleeps and starts again on its next use", "sandbox", sb.ID, "err", cause)
	return sandbox.Wrap(sandbox.KindBadGateway, cause, "the sandbox died (it may have run out of memory); its files are kept and the next call starts it again")
}

// StopResult says what Stop did.
type StopResult = wire.Stopped

// Stop ends the WORK: it cancels every in-flight command of the sandbox
// (each killed inside the sandbox, not only its client), then kills every
// other process a command left behind (background jobs, daemons), and
// answers how many commands it cancelled. The sandbox, its files and its
// lease stay.
func (s *Service) Stop(ctx context.Context, id string) (*StopResult, error) {
	sb, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	n := s.cmds.stop(sb.Org, sb.ID, 15*time.Second)
	s.cmds.release(sb.ID, 15*time.Second)
	if sb.Status == sandbox.StatusRunning {
		killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if err := s.d.Runtime.Stop(killCtx, sb.Name); err != nil {
			s.log.Warn("killing leftover processes", "sandbox", sb.ID, "err", err)
		}
	}
	s.log.Info("sandbox work stopped", "sandbox", sb.ID, "commands", n)
	return &StopResult{ID: sb.ID, Stopped: n}, nil
}

// EndResult says what End did.
type EndResult = wire.Ended

// End removes the container and the row. The project volume is kept unless
// purge is set; a scratch volume always dies with its sandbox. If the
// container cannot be removed the row is kept, so that a later end or the
// reaper can finish the job. A sandbox still starting is refused (409): its
// lease call owns it until it answers.
func (s *Service) End(ctx context.Context, id string, purge bool) (*EndResult, error) {
	return s.EndIf(ctx, id, purge, nil)
}

// EndIf is End with a guard evaluated on the current row under the
// sandbox's lock: when the guard says no, nothing happens and the result is
// nil. The reaper uses it so that a lease renewed since its snapshot is
// not ended.
func (s *Service) EndIf(ctx context.Context, id string, purge bool, guard func(*sandbox.Sandbox) bool) (*EndResult, error) {
	if !sandbox.ValidID(id) {
		return nil, notFound()
	}
	unlock := s.lockSandbox(ctx, id)
	defer unlock()
	sb, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if guard != nil && !guard(sb) {
		return nil, nil
	}
	if sb.Status == sandbox.StatusPending && s.now().Sub(sb.CreatedAt) < s.cfg.StartTimeout+recordTimeout+time.Minute {
		return nil, notRunning(sb)
	}
	ctx = context.WithoutCancel(ctx)
	log := s.log.With("sandbox", sb.ID)
	s.cmds.stop(sb.Org, sb.ID, 5*time.Second)
	s.cmds.release(sb.ID, 5*time.Second)
	if sb.Status != sandbox.StatusSleeping && sb.UID != "" {
		err := s.d.Runtime.Delete(ctx, runtime.Ref{Name: sb.Name, UID: sb.UID})
		switch {
		case err == nil, errors.Is(err, runtime.ErrNotFound):
		case errors.Is(err, runtime.ErrConflict):
			// The name now belongs to another identity: never touch it.
			log.Warn("runtime object identity changed; not deleting it", "err", err)
		default:
			log.Error("ending sandbox", "err", err)
			return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be ended; try again")
		}
	}
	var errs []error
	if sb.Checkpoint != "" && s.caps.Checkpoint != nil {
		errs = append(errs, s.caps.Checkpoint.DropCheckpoint(ctx, sb.Checkpoint))
	}
	if sb.Project == "" || purge {
		errs = append(errs, s.d.Runtime.DeleteVolume(ctx, sb.Volume))
	}
	if err := errors.Join(errs...); err != nil {
		log.Error("dropping the sandbox's storage", "err", err)
		return nil, sandbox.Wrap(sandbox.KindInternal, err, "the sandbox's storage could not be dropped")
	}
	wasLeased := sb.Status == sandbox.StatusRunning || sb.Status == sandbox.StatusSleeping
	if err := s.transition(ctx, sb, moved(sb, sandbox.StatusEnded)); err != nil {
		return nil, err
	}
	if purge && sb.Project != "" {
		s.forgetProject(ctx, sb.Project)
	}
	if wasLeased {
		if err := s.d.Store.AddUsage(ctx, sb.Class, 0, s.now().Sub(sb.CreatedAt)); err != nil {
			log.Error("recording usage", "err", err)
		}
	}
	s.d.Credentials.Forget(sb.ID)
	log.Info("sandbox ended", "purge", purge)
	return &EndResult{ID: sb.ID, Ended: true, Purged: purge && sb.Project != ""}, nil
}
