package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/quota"
)

// errStopped is the cause given to commands cancelled by Stop.
var errStopped = errors.New("stopped by the caller")

// inflight tracks the running commands of each sandbox, so that Stop can
// cancel them all and a sleep backs off, and counts each org's commands
// for its quota. It lives in memory on purpose: a command does not outlive
// the server process that runs its client. Nothing in it outlives its
// command: the maps hold only what runs.
type inflight struct {
	// orgs count each org's commands for its quota, with the work that
	// runs no program (quota.Commands, shared with internal/usage).
	orgs *quota.Commands

	mu   sync.Mutex
	next uint64
	cmds byID // by org and sandbox id (workKey)
	// chans are the channels held open into each sandbox (a preview
	// relay): no command, never counted, and closed before a sleep.
	chans byID
}

type command struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// byID is work registered per sandbox id: the commands, or the channels.
type byID map[string]map[uint64]*command

// start registers work on sandbox id of org and returns its context and
// the function to call when it has finished. With limit >= 0 the work is a
// command and counts against org's limit: at the limit nothing is
// registered and the refusal (429) is the error.
func (f *inflight) start(ctx context.Context, org, id string, limit int) (_ context.Context, done func(), err error) {
	release := func() {}
	if limit >= 0 {
		if release, err = f.orgs.Take(org, limit); err != nil {
			return nil, nil, err
		}
	}
	ctx, done = f.register(&f.cmds, ctx, workKey(org, id), release)
	return ctx, done, nil
}

// workKey keys a command by its org and sandbox id: a caller of another
// org naming the id (its answer a 404 to come) registers apart, and never
// counts as the owner's work (which a sleep would back off from).
func workKey(org, id string) string { return org + "\x00" + id }

// hold registers a channel into sandbox id: its context ends when the
// sandbox sleeps, is stopped or ends, or done is called.
func (f *inflight) hold(ctx context.Context, id string) (context.Context, func()) {
	return f.register(&f.chans, ctx, id, func() {})
}

// register adds work on sandbox id to m; done (once, then a no-op)
// removes it, calls release and ends its context.
func (f *inflight) register(m *byID, ctx context.Context, id string, release func()) (context.Context, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = byID{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c := &command{cancel: cancel, done: make(chan struct{})}
	if (*m)[id] == nil {
		(*m)[id] = map[uint64]*command{}
	}
	f.next++
	key := f.next
	(*m)[id][key] = c
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			f.mu.Lock()
			delete((*m)[id], key)
			if len((*m)[id]) == 0 {
				delete(*m, id)
			}
			f.mu.Unlock()
			release()
			cancel(nil)
			close(c.done)
		})
	}
}

// stop cancels every command of sandbox id of org and waits (up to wait)
// until they have returned, which is after the runtime killed them inside.
func (f *inflight) stop(org, id string, wait time.Duration) int {
	return f.cancelAll(&f.cmds, workKey(org, id), wait)
}

// release closes the channels into sandbox id and waits (up to wait)
// until their holders are done.
func (f *inflight) release(id string, wait time.Duration) {
	f.cancelAll(&f.chans, id, wait)
}

// cancelAll cancels the work of sandbox id in m and waits (up to wait)
// until it is done; it answers how much there was.
func (f *inflight) cancelAll(m *byID, id string, wait time.Duration) int {
	f.mu.Lock()
	var all []*command
	for _, c := range (*m)[id] {
		all = append(all, c)
	}
	f.mu.Unlock()
	for _, c := range all {
		c.cancel(errStopped)
	}
	deadline := time.After(wait)
	for _, c := range all {
		select {
		case <-c.done:
		case <-deadline:
			return len(all)
		}
	}
	return len(all)
}

// count reports how many commands of sandbox id of org run.
func (f *inflight) count(org, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cmds[workKey(org, id)])
}

// sizes reports the sizes of the maps (for the test that they do not grow).
func (f *inflight) sizes() (sandboxes, orgs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cmds) + len(f.chans), f.orgs.Orgs()
}
