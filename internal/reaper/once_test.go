package reaper_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

type env struct {
	t   *testing.T
	st  *store.Store
	rt  *fake.Runtime
	svc *service.Service
	r   *reaper.Reaper

	mu  sync.Mutex
	now time.Time
}

func newEnv(t *testing.T) *env {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, rt: fake.New(), now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	e.rt.Now = e.clock
	e.svc = service.New(service.Config{}, service.Deps{Store: st, Runtime: e.rt, Now: e.clock})
	// Ceiling zero: the service's zero, sandbox.DefaultCeiling.
	e.r = &reaper.Reaper{Config: reaper.Config{IdleAfter: time.Hour},
		Store: st, Service: e.svc, Runtime: e.rt, Log: slog.New(slog.DiscardHandler), Now: e.clock}
	return e
}

func (e *env) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }
func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func org(o string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: o, Subject: "test"})
}

func (e *env) lease(ctx context.Context, req service.LeaseRequest) *sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.svc.Lease(ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func (e *env) status(ctx context.Context, id string) sandbox.Status {
	sb, err := e.st.Get(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return sandbox.StatusEnded
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return sb.Status
}

// TestOnce: one round ends what is due in every org, sleeps what is idle,
// and leaves the rest.
func TestOnce(t *testing.T) {
	e := newEnv(t)
	acme, globex := org("acme"), org("globex")
	short := e.lease(acme, service.LeaseRequest{TTLSec: 60})
	long := e.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	busy := e.lease(globex, service.LeaseRequest{Class: "dev", Project: "p", TTLSec: 7200})
	e.rt.Set(func(r *fake.Runtime) { r.CreateErr = errors.New("x") })
	e.svc.Lease(globex, service.LeaseRequest{})
	e.rt.Set(func(r *fake.Runtime) { r.CreateErr = nil })
	errored, err := e.st.List(globex, store.Filter{Status: sandbox.StatusError})
	if err != nil {
		t.Fatal(err)
	}

	e.advance(61 * time.Minute)
	if _, err := e.svc.Exec(globex, busy.ID, service.ExecRequest{Command: "true"}, nil, nil); err != nil {
		t.Fatal(err) // used just now: not idle
	}
	e.r.Once(context.Background())
	for _, tc := range []struct {
		name string
		ctx  context.Context
		id   string
		want sandbox.Status
	}{
		{"expired", acme, short.ID, sandbox.StatusEnded},
		{"idle an hour", acme, long.ID, sandbox.StatusSleeping},
		{"used recently", globex, busy.ID, sandbox.StatusRunning},
		{"error row", globex, errored[0].ID, sandbox.StatusEnded},
	} {
		if got := e.status(tc.ctx, tc.id); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// Past the ceiling, even a renewed lease ends.
	e.advance(24 * time.Hour)
	e.r.Once(context.Background())
	if got := e.status(globex, busy.ID); got != sandbox.StatusEnded {
		t.Errorf("past the ceiling: %s", got)
	}
}

// staleStore answers List from a snapshot taken before a renew.
type staleStore struct {
	*store.Store
	snapshot []*sandbox.Sandbox
}

func (s staleStore) List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error) {
	return s.snapshot, nil
}

// TestOnceRechecksUnderTheLock: a lease renewed after the reaper's snapshot
// is not ended: the rule is applied again to the current row.
func TestOnceRechecksUnderTheLock(t *testing.T) {
	e := newEnv(t)
	acme := org("acme")
	sb := e.lease(acme, service.LeaseRequest{TTLSec: 60})
	e.advance(2 * time.Minute)
	snap, err := e.st.List(acme, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Renew(acme, sb.ID, 600); err != nil {
		t.Fatal(err)
	}
	e.r.Store = staleStore{Store: e.st, snapshot: snap}
	e.r.Once(context.Background())
	if got := e.status(acme, sb.ID); got != sandbox.StatusRunning {
		t.Errorf("a renewed lease was reaped: %s", got)
	}
}

// failingStore cannot read one org's store.
type failingStore struct {
	*store.Store
	bad string
}

func (s failingStore) List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error) {
	if p, _ := sandbox.PrincipalFrom(ctx); p.Org == s.bad {
		return nil, errors.New("disk I/O error")
	}
	return s.Store.List(ctx, f)
}

func TestSweep(t *testing.T) {
	e := newEnv(t)
	acme := org("acme")
	sb := e.lease(acme, service.LeaseRequest{})
	e.lease(org("globex"), service.LeaseRequest{})
	row, _ := e.st.Get(acme, sb.ID)
	e.rt.Put("sbx-orphan-old", "u1", "sb_gone", e.clock().Add(-time.Hour), true)
	e.rt.Put("sbx-orphan-new", "u2", "sb_new", e.clock(), true)

	t.Run("an unreadable store: nothing deleted", func(t *testing.T) {
		r := &reaper.Reaper{Store: failingStore{Store: e.st, bad: "globex"}, Service: e.svc, Runtime: e.rt, Log: e.r.Log, Now: e.clock}
		n, err := r.Sweep(context.Background())
		if err == nil || n != 0 || !slices.Contains(e.rt.Objects(), "sbx-orphan-old") {
			t.Errorf("swept %d (%v) with a store unreadable: %v", n, err, e.rt.Objects())
		}
	})
	n, err := e.r.Sweep(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	objs := e.rt.Objects()
	if slices.Contains(objs, "sbx-orphan-old") || !slices.Contains(objs, "sbx-orphan-new") || !slices.Contains(objs, row.Name) {
		t.Errorf("after the sweep: %v", objs)
	}
	// A sleeping sandbox's row still claims its name.
	if _, err := e.svc.Sleep(acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Hour)
	if n, err := e.r.Sweep(context.Background()); err != nil || n != 1 {
		t.Errorf("second sweep: %d %v (the young orphan has aged)", n, err)
	}
}

// settlingStore is a lease settling while the sweep reads the rows: once
// the rows are read, the object name is claimed by a row (written just
// after the read) and no longer held by the server (Keep).
type settlingStore struct {
	*store.Store
	settle func()
}

func (s settlingStore) List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error) {
	rows, err := s.Store.List(ctx, f)
	s.settle()
	return rows, err
}

// TestSweepAsksKeepFirst: an object the server holds with no row (a warm
// sandbox a lease has taken, older than the grace: it waited in the pool)
// is asked about before the rows are read, so one whose row is written
// (and which the server lets go of) after the read is never deleted.
func TestSweepAsksKeepFirst(t *testing.T) {
	e := newEnv(t)
	e.lease(org("acme"), service.LeaseRequest{})
	e.rt.Put("sbx-warm-taken", "u1", "sb_warm", e.clock().Add(-time.Hour), true)
	var mu sync.Mutex
	held := true
	r := &reaper.Reaper{Runtime: e.rt, Service: e.svc, Log: e.r.Log, Now: e.clock,
		Store: settlingStore{Store: e.st, settle: func() { mu.Lock(); held = false; mu.Unlock() }},
		Keep:  func(name string) bool { mu.Lock(); defer mu.Unlock(); return held && name == "sbx-warm-taken" }}
	if n, err := r.Sweep(context.Background()); err != nil || n != 0 || !slices.Contains(e.rt.Objects(), "sbx-warm-taken") {
		t.Errorf("swept %d (%v): %v; the taken warm sandbox must stay", n, err, e.rt.Objects())
	}
}

// TestRunDrains: Run reaps at start, and returns once ctx ends.
func TestRunDrains(t *testing.T) {
	e := newEnv(t)
	acme := org("acme")
	sb := e.lease(acme, service.LeaseRequest{TTLSec: 1})
	e.advance(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.r.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for e.status(acme, sb.ID) != sandbox.StatusEnded && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := e.status(acme, sb.ID); got != sandbox.StatusEnded {
		t.Errorf("the first round did not run: %s", got)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []reaper.Config{{Every: -1}, {Grace: -1}, {Concurrency: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
	if err := (reaper.Config{}).Validate(); err != nil {
		t.Errorf("the zero config: %v", err)
	}
}
