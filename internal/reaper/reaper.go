// Package reaper ends leases that are over: expired, past the absolute
// ceiling, or left in error. Whether a sandbox is due is a pure function of
// the row and `now`, so the rules are table-tested without a clock; the loop
// around it visits every org's store on an interval, ends what is due with
// bounded concurrency, never ends the same sandbox twice at once, and drains
// in-flight ends on shutdown.
package reaper

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

// Reason says why a sandbox is due; empty means it is not.
type Reason string

const (
	NotDue  Reason = ""
	Expired Reason = "lease expired"
	Ceiling Reason = "past the absolute ceiling"
	Errored Reason = "left in error"
)

// Due decides whether sb must end at now. A pending row is never due on its
// own expiry: its lease call is still running and will finish or record an
// error.
func Due(sb *sandbox.Sandbox, now time.Time, ceiling time.Duration) Reason {
	switch {
	case sb.Status == sandbox.StatusError:
		return Errored
	case sb.Status == sandbox.StatusPending && now.Sub(sb.CreatedAt) < time.Hour:
		return NotDue
	case !now.Before(sb.CreatedAt.Add(ceiling)):
		return Ceiling
	case !now.Before(sb.ExpiresAt):
		return Expired
	}
	return NotDue
}

// Store is what the reaper reads.
type Store interface {
	Orgs(ctx context.Context) ([]string, error)
	List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error)
}

// Ender ends a sandbox of the org in ctx.
type Ender interface {
	End(ctx context.Context, id string, purge bool) (*service.EndResult, error)
}

// Reaper is the loop.
type Reaper struct {
	Store       Store
	Ender       Ender
	Every       time.Duration
	Ceiling     time.Duration
	Concurrency int // zero means 4
	Log         *slog.Logger
	Now         func() time.Time // nil means time.Now

	mu       sync.Mutex
	inFlight map[string]bool
	wg       sync.WaitGroup
}

// Run reaps once at start and then every interval until ctx ends, then waits
// for in-flight ends.
func (r *Reaper) Run(ctx context.Context) {
	t := time.NewTicker(r.Every)
	defer t.Stop()
	defer r.wg.Wait()
	for {
		r.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once visits every org and starts ending what is due; it returns once every
// end it started has finished.
func (r *Reaper) Once(ctx context.Context) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	conc := r.Concurrency
	if conc <= 0 {
		conc = 4
	}
	orgs, err := r.Store.Orgs(ctx)
	if err != nil {
		r.Log.Error("reaper: listing orgs", "err", err)
		return
	}
	sem := make(chan struct{}, conc)
	var round sync.WaitGroup
	for _, org := range orgs {
		octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "reaper"})
		// Collect first, act after: the list is a snapshot.
		rows, err := r.Store.List(octx, store.Filter{Limit: 100000})
		if err != nil {
			r.Log.Error("reaper: reading a store", "err", err)
			continue
		}
		for _, sb := range rows {
			why := Due(sb, now().UTC(), r.Ceiling)
			if why == NotDue || !r.claim(sb.ID) {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				r.release(sb.ID)
				round.Wait()
				return
			}
			round.Add(1)
			r.wg.Add(1)
			go func() {
				defer func() { <-sem; r.release(sb.ID); round.Done(); r.wg.Done() }()
				// An end that has started finishes even during shutdown.
				if _, err := r.Ender.End(context.WithoutCancel(octx), sb.ID, false); err != nil {
					r.Log.Error("reaper: ending", "sandbox", sb.ID, "reason", string(why), "err", err)
					return
				}
				r.Log.Info("reaper: ended", "sandbox", sb.ID, "reason", string(why))
			}()
		}
	}
	round.Wait()
}

func (r *Reaper) claim(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight == nil {
		r.inFlight = map[string]bool{}
	}
	if r.inFlight[id] {
		return false
	}
	r.inFlight[id] = true
	return true
}

func (r *Reaper) release(id string) {
	r.mu.Lock()
	delete(r.inFlight, id)
	r.mu.Unlock()
}
