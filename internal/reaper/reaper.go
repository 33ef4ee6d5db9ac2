// Package reaper ends leases that are over: expired, past the absolute
// ceiling, or left in error. Whether a sandbox is due is a pure function of
// the row and `now`, so the rules are table-tested without a clock; the loop
// around it visits every org's store on an interval, ends what is due with
// bounded concurrency, never ends the same sandbox twice at once, and drains
// in-flight ends on shutdown.
package reaper

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/flagx"
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
	Stuck   Reason = "pending for over an hour"
	Idle    Reason = "idle" // the one reason that sleeps instead of ending
)

// Policy holds the bounds Due applies.
type Policy struct {
	Ceiling   time.Duration // absolute bound from creation
	IdleAfter time.Duration // unused this long → sleep; not positive: never
}

// Config is the reaper's schedule and bounds, as an operator sets them.
type Config struct {
	// Every is the interval between rounds; zero means one minute.
	Every time.Duration
	// IdleAfter puts a running sandbox unused this long to sleep; zero
	// means DefaultIdleAfter, negative never (the flag's 0).
	IdleAfter time.Duration
	// Grace is how old an unclaimed runtime object must be before the
	// sweep deletes it; zero means DefaultGrace.
	Grace time.Duration
	// Concurrency bounds the ends of one round; zero means 4.
	Concurrency int
}

// DefaultIdleAfter is the idle bound `sandbox serve` starts with.
const DefaultIdleAfter = time.Hour

// withDefaults is THE place the defaults are applied.
func (c Config) withDefaults() Config {
	if c.Every == 0 {
		c.Every = time.Minute
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.IdleAfter == 0 {
		c.IdleAfter = DefaultIdleAfter
	}
	return c
}

// RegisterFlags defines the reaper's flags on fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := c.withDefaults()
	fs.DurationVar(&c.Every, "reap-every", d.Every, "how often the reaper ends expired leases, sleeps idle sandboxes and sweeps orphans")
	c.IdleAfter = d.IdleAfter
	fs.Var(flagx.DurationOff(&c.IdleAfter), "idle-after", "put a sandbox unused this long to sleep (memory checkpointed); 0 never")
	fs.DurationVar(&c.Grace, "sweep-grace", d.Grace, "age before a runtime object that no row claims is swept")
}

// Validate refuses a schedule the reaper cannot keep.
func (c Config) Validate() error {
	switch {
	case c.Every < 0:
		return errors.New("--reap-every must be positive")
	case c.Grace < 0:
		return errors.New("--sweep-grace must not be negative")
	case c.Concurrency < 0:
		return errors.New("the reaper's concurrency must not be negative")
	}
	return nil
}

// Due decides what sb needs at now. A pending row is left to its lease call
// for an hour; a sleeping one ends on its lease like any other.
func (p Policy) Due(sb *sandbox.Sandbox, now time.Time) Reason {
	switch {
	case sb.Status == sandbox.StatusError:
		return Errored
	case sb.Status == sandbox.StatusPending:
		if now.Sub(sb.CreatedAt) >= time.Hour {
			return Stuck
		}
		return NotDue
	case !now.Before(sb.CreatedAt.Add(p.Ceiling)):
		return Ceiling
	case !now.Before(sb.ExpiresAt):
		return Expired
	case sb.Status == sandbox.StatusRunning && p.IdleAfter > 0 && now.Sub(sb.LastUsedAt) >= p.IdleAfter:
		return Idle
	}
	return NotDue
}

// Store is what the reaper reads.
type Store interface {
	Orgs(ctx context.Context) ([]string, error)
	List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error)
}

// Service is what the reaper does to a sandbox of the org in ctx. The
// guard is checked again on the current row under the sandbox's lock, so a
// lease renewed (or used) since the reaper's snapshot is left alone.
type Service interface {
	EndIf(ctx context.Context, id string, purge bool, guard func(*sandbox.Sandbox) bool) (*service.EndResult, error)
	SleepIf(ctx context.Context, id string, guard func(*sandbox.Sandbox) bool) (*sandbox.Sandbox, error)
}

// Reaper is the loop.
type Reaper struct {
	Config
	// Ceiling is the absolute bound on a lease, the service's.
	Ceiling time.Duration
	Store   Store
	Service Service
	Runtime Runtime // for the orphan sweep; nil sweeps nothing
	// Keep names the objects the server holds with no row yet (the warm
	// pool's), which the sweep spares; nil keeps none.
	Keep func(name string) bool
	Log  *slog.Logger
	Now  func() time.Time // nil means time.Now

	mu       sync.Mutex
	inFlight map[string]bool
	wg       sync.WaitGroup
}

// Run reaps and sweeps once at start and then every interval until ctx ends,
// then waits for in-flight ends.
func (r *Reaper) Run(ctx context.Context) {
	t := time.NewTicker(r.withDefaults().Every)
	defer t.Stop()
	defer r.wg.Wait()
	for {
		r.Once(ctx)
		if r.Runtime != nil {
			if _, err := r.Sweep(ctx); err != nil {
				r.Log.Error("reaper: sweep", "err", err)
			}
		}
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
	now := r.clock()
	conc := r.withDefaults().Concurrency
	policy := r.policy()
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
			why := policy.Due(sb, now().UTC())
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
				r.act(octx, sb.ID, why, policy, now)
			}()
		}
	}
	round.Wait()
}

// act ends (or, for Idle, sleeps) one sandbox if it is still due for the
// same reason. Work that has started finishes even during shutdown.
func (r *Reaper) act(ctx context.Context, id string, why Reason, policy Policy, now func() time.Time) {
	ctx = context.WithoutCancel(ctx)
	still := func(sb *sandbox.Sandbox) bool { return policy.Due(sb, now().UTC()) == why }
	var err error
	if why == Idle {
		_, err = r.Service.SleepIf(ctx, id, still)
	} else {
		_, err = r.Service.EndIf(ctx, id, false, still)
	}
	if err != nil {
		r.Log.Error("reaper: "+string(why), "sandbox", id, "err", err)
		return
	}
	r.Log.Debug("reaper: acted", "sandbox", id, "reason", string(why))
}

// policy is what Due applies: the ceiling and the idle bound.
func (r *Reaper) policy() Policy {
	c := r.Ceiling
	if c <= 0 {
		c = sandbox.DefaultCeiling
	}
	return Policy{Ceiling: c, IdleAfter: r.withDefaults().IdleAfter}
}

func (r *Reaper) clock() func() time.Time {
	if r.Now != nil {
		return r.Now
	}
	return time.Now
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
