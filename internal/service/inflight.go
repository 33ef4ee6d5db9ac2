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
	cmds map[string]map[uint64]*command // by sandbox id
	// chans are the channels held open into each sandbox (a preview
	// relay): no command, never counted, and closed before a sleep.
	chans map[string]map[uint64]*command
}

type command struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

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
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cmds == nil {
		f.cmds = map[string]map[uint64]*command{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c := &command{cancel: cancel, done: make(chan struct{})}
	if f.cmds[id] == nil {
		f.cmds[id] = map[uint64]*command{}
	}
	f.next++
	key := f.next
	f.cmds[id][key] = c
	return ctx, func() {
		f.mu.Lock()
		delete(f.cmds[id], key)
		if len(f.cmds[id]) == 0 {
			delete(f.cmds, id)
		}
		f.mu.Unlock()
		release()
		cancel(nil)
		close(c.done)
	}, nil
}

// hold registers a channel into sandbox id: its context ends when the
// sandbox sleeps, is stopped or ends, or done is called.
func (f *inflight) hold(ctx context.Context, id string) (context.Context, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.chans == nil {
		f.chans = map[string]map[uint64]*command{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c := &command{cancel: cancel, done: make(chan struct{})}
	if f.chans[id] == nil {
		f.chans[id] = map[uint64]*command{}
	}
	f.next++
	key := f.next
	f.chans[id][key] = c
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.chans[id], key)
			if len(f.chans[id]) == 0 {
				delete(f.chans, id)
			}
			f.mu.Unlock()
			cancel(nil)
			close(c.done)
		})
	}
}

// release closes the channels into sandbox id and waits (up to wait)
// until their holders are done.
func (f *inflight) release(id string, wait time.Duration) {
	f.mu.Lock()
	var chans []*command
	for _, c := range f.chans[id] {
		chans = append(chans, c)
	}
	f.mu.Unlock()
	for _, c := range chans {
		c.cancel(errStopped)
	}
	deadline := time.After(wait)
	for _, c := range chans {
		select {
		case <-c.done:
		case <-deadline:
			return
		}
	}
}

// stop cancels every command of sandbox id and waits (up to wait) until
// they have returned, which is after the runtime killed them inside.
func (f *inflight) stop(id string, wait time.Duration) int {
	f.mu.Lock()
	var cmds []*command
	for _, c := range f.cmds[id] {
		cmds = append(cmds, c)
	}
	f.mu.Unlock()
	for _, c := range cmds {
		c.cancel(errStopped)
	}
	deadline := time.After(wait)
	for _, c := range cmds {
		select {
		case <-c.done:
		case <-deadline:
			return len(cmds)
		}
	}
	return len(cmds)
}

// count reports how many commands of sandbox id run.
func (f *inflight) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cmds[id])
}

// sizes reports the sizes of the maps (for the test that they do not grow).
func (f *inflight) sizes() (sandboxes, orgs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cmds) + len(f.chans), f.orgs.Orgs()
}
