package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errStopped is the cause given to commands cancelled by Stop.
var errStopped = errors.New("stopped by the caller")

// inflight tracks the running commands of each sandbox, so that Stop can
// cancel them all and a sleep backs off, and counts each org's commands
// for its quota. It lives in memory on purpose: a command does not outlive
// the server process that runs its client. Nothing in it outlives its
// command: the maps hold only what runs.
type inflight struct {
	mu     sync.Mutex
	next   uint64
	cmds   map[string]map[uint64]*command // by sandbox id
	perOrg map[string]int                 // commands (and slots) by org
}

type command struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// start registers work on sandbox id of org and returns its context and
// the function to call when it has finished. With limit >= 0 the work is a
// command and counts against org's limit: at the limit nothing is
// registered, ok is false and n says how many run.
func (f *inflight) start(ctx context.Context, org, id string, limit int) (_ context.Context, done func(), n int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	counted := limit >= 0
	if counted {
		if n, ok := f.take(org, limit); !ok {
			return nil, nil, n, false
		}
	}
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
		if counted {
			f.release(org)
		}
		f.mu.Unlock()
		cancel(nil)
		close(c.done)
	}, 0, true
}

// takeSlot counts one of org's commands that runs no program (a follower).
func (f *inflight) takeSlot(org string, limit int) (release func(), n int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.take(org, limit); !ok {
		return nil, n, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.release(org)
			f.mu.Unlock()
		})
	}, 0, true
}

// take counts one more of org's commands unless limit are running (then
// it answers how many); f.mu is held.
func (f *inflight) take(org string, limit int) (int, bool) {
	if f.perOrg == nil {
		f.perOrg = map[string]int{}
	}
	if n := f.perOrg[org]; n >= limit {
		return n, false
	}
	f.perOrg[org]++
	return 0, true
}

// release gives back one of org's slots; f.mu is held.
func (f *inflight) release(org string) {
	if f.perOrg[org]--; f.perOrg[org] <= 0 {
		delete(f.perOrg, org)
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

// orgCount reports how many commands of org run.
func (f *inflight) orgCount(org string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perOrg[org]
}

// sizes reports the sizes of the maps (for the test that they do not grow).
func (f *inflight) sizes() (sandboxes, orgs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cmds), len(f.perOrg)
}
