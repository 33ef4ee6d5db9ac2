package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errStopped is the cause given to commands cancelled by Stop.
var errStopped = errors.New("stopped by the caller")

// inflight tracks the running commands of each sandbox so that Stop can
// cancel them all. It lives in memory on purpose: a command does not outlive
// the server process that runs its client.
type inflight struct {
	mu   sync.Mutex
	next uint64
	cmds map[string]map[uint64]*command // by sandbox id
}

type command struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// start registers a command of sandbox id and returns its context and the
// function to call when it has finished.
func (f *inflight) start(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &command{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	if f.cmds == nil {
		f.cmds = map[string]map[uint64]*command{}
	}
	if f.cmds[id] == nil {
		f.cmds[id] = map[uint64]*command{}
	}
	f.next++
	n := f.next
	f.cmds[id][n] = c
	f.mu.Unlock()
	return ctx, func() {
		f.mu.Lock()
		delete(f.cmds[id], n)
		if len(f.cmds[id]) == 0 {
			delete(f.cmds, id)
		}
		f.mu.Unlock()
		cancel(nil)
		close(c.done)
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
