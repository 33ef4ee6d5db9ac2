package usage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/usage"
)

func org(name string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: name, Subject: "test"})
}

func ptr[T any](v T) *T { return &v }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	st   *store.Store
	svc  *service.Service
	r    *usage.Report
	cmds *quota.Commands
	clk  *clock
}

func newEnv(t *testing.T, server quota.Policy) *env {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	rt := fake.New()
	rt.Now = clk.now
	cmds := &quota.Commands{}
	svc := service.New(service.Config{StartTimeout: 5 * time.Second, Quota: server}, service.Deps{Store: st, Runtime: rt, Quotas: st, Commands: cmds, Now: clk.now})
	r := usage.New(server, st, st, cmds)
	r.SetNow(clk.now)
	return &env{st: st, svc: svc, r: r, cmds: cmds, clk: clk}
}

// TestPolicy: the policy in force is the server's (defaults where it sets
// nothing) under the operator's override of the caller's org, and only of
// that org; a call with no org is refused.
func TestPolicy(t *testing.T) {
	e := newEnv(t, quota.Policy{Commands: ptr(5)})
	if err := e.st.SetOrgQuota(context.Background(), "acme", quota.Policy{Commands: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	p, err := e.r.Policy(org("acme"))
	if err != nil || *p.Commands != 2 || p.CPUs == nil || *p.CPUs != *quota.Default().CPUs {
		t.Errorf("acme's policy: %+v %v", p, err)
	}
	if p, err := e.r.Policy(org("globex")); err != nil || *p.Commands != 5 {
		t.Errorf("globex's policy: %+v %v", p, err)
	}
	if _, err := e.r.Policy(context.Background()); err == nil {
		t.Error("a policy with no org")
	}
}

// TestLinesAndAcquire: the commands line counts the service's commands
// and the followers' slots alike, one count; a slot past the quota is a
// 429 with a retry hint, and a released one frees its place (twice is
// once).
func TestLinesAndAcquire(t *testing.T) {
	e := newEnv(t, quota.Policy{Commands: ptr(2)})
	acme := org("acme")
	release, err := e.r.Acquire(acme)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.svc.Lease(acme, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, done, err := e.svc.Use(acme, sb.ID) // the service's command, from the same count
	if err != nil {
		t.Fatal(err)
	}
	commands := func() quota.Line {
		lines, err := e.r.QuotaLines(acme)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if l.Name == quota.NameCommands {
				return l
			}
		}
		t.Fatalf("no commands line in %+v", lines)
		return quota.Line{}
	}
	if l := commands(); l.Used != 2 || l.Limit != 2 {
		t.Errorf("commands line %+v", l)
	}
	_, err = e.r.Acquire(acme)
	var se *sandbox.Error
	if sandbox.KindOf(err) != sandbox.KindLimit || !errors.As(err, &se) || se.RetryAfter != quota.RetryAfterCommand {
		t.Errorf("a slot past the quota: %v", err)
	}
	if _, _, _, err := e.svc.Use(acme, sb.ID); sandbox.KindOf(err) != sandbox.KindLimit {
		t.Errorf("a command past the quota: %v", err)
	}
	if _, err := e.r.Acquire(org("globex")); err != nil {
		t.Errorf("another org: %v", err)
	}
	release()
	release()
	done()
	if l := commands(); l.Used != 0 {
		t.Errorf("after release: %+v", l)
	}
}

// TestUsage: lease-seconds by class are what ended leases recorded plus
// what live ones have run so far, in the class table's order.
func TestUsage(t *testing.T) {
	e := newEnv(t, quota.Policy{})
	acme := org("acme")
	ended, err := e.svc.Lease(acme, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.advance(90 * time.Second)
	if _, err := e.svc.End(acme, ended.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "p"}); err != nil {
		t.Fatal(err)
	}
	e.clk.advance(30 * time.Second)
	u, err := e.r.Usage(acme)
	if err != nil || len(u) != 2 {
		t.Fatalf("usage %+v %v", u, err)
	}
	by := map[string]store.Usage{u[0].Class: u[0], u[1].Class: u[1]}
	if x := by[ended.Class]; x.Leases != 1 || x.LeaseSeconds != 90 {
		t.Errorf("the ended lease: %+v", x)
	}
	if d := by["dev"]; d.LeaseSeconds != 30 {
		t.Errorf("the live lease: %+v", d)
	}
	if u, err := e.r.Usage(org("globex")); err != nil || len(u) != 0 {
		t.Errorf("another org: %+v %v", u, err)
	}
}
