package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/warm"
)

// TestLeaseTakesWarm: a lease of the exec class's image with no project
// and no network is handed a sandbox the pool started (WarmSpec's: the
// spec the lease would have made), relabelled for its org before its row
// names it, and starts nothing, and settles it with the pool once its row
// is written; a lease the pool cannot serve starts its own.
func TestLeaseTakesWarm(t *testing.T) {
	var pool *warm.Pool
	exec := sandbox.MustClass(sandbox.ClassExec)
	h := newHarness(t, func(_ *service.Config, d *service.Deps) {
		pool = warm.New(warm.Config{Size: 1}, d.Runtime, exec.Name, exec.Image, service.WarmSpec(exec, sandbox.RuntimeGVisor), nil)
		d.Warm = pool
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pool.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitWarm := func() string {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); pool.Ready() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the pool never filled")
			}
		}
		objs, err := h.rt.List(t.Context(), map[string]string{warm.Label: ""})
		if err != nil || len(objs) != 1 {
			t.Fatalf("warm objects: %v %v", objs, err)
		}
		return objs[0].Name
	}

	name := waitWarm()
	warmSpec, _ := h.rt.Spec(name)
	sb := h.lease(acme, service.LeaseRequest{})
	if sb.Name != name || sb.ID != warmSpec.Labels[runtime.LabelSandbox] {
		t.Fatalf("the lease %s (%s) did not take the warm %s", sb.ID, sb.Name, name)
	}
	obj, err := h.rt.Status(t.Context(), name)
	if err != nil || obj.Labels[runtime.LabelOrg] != sandbox.Slug("acme") || obj.Labels[warm.Label] != "" || obj.Labels[runtime.LabelSandbox] != sb.ID {
		t.Fatalf("the taken object's labels: %v %v", obj.Labels, err)
	}
	if row := h.row(acme, sb.ID); row.Status != sandbox.StatusRunning || row.UID != obj.UID || row.Volume != warmSpec.Volume.Name {
		t.Errorf("row %+v, object uid %s, volume %s", row, obj.UID, warmSpec.Volume.Name)
	}
	if pool.Holds(name) {
		t.Error("the pool still holds a sandbox whose lease wrote its row (the lease never settled it)")
	}
	name = waitWarm()
	netd := h.lease(acme, service.LeaseRequest{Network: &netpolicy.Policy{}})
	proj := h.lease(acme, service.LeaseRequest{Project: "p1"})
	for _, sb := range []*sandbox.Sandbox{netd, proj} {
		if sb.Name == name {
			t.Errorf("a lease with a network or a project took the warm sandbox")
		}
	}
	if !pool.Holds(name) {
		t.Error("the pool let go of its sandbox for leases it cannot serve")
	}
}

// TestWarmSpec: a warm sandbox is started from the spec a plain lease
// makes, but for its name, id and labels.
func TestWarmSpec(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{})
	own, _ := h.rt.Spec(sb.Name)
	got := service.WarmSpec(sandbox.MustClass(sandbox.ClassExec), sandbox.RuntimeGVisor)("sb_x", "sbx-x")
	if got.Name != "sbx-x" || got.Labels[runtime.LabelSandbox] != "sb_x" || got.Labels[warm.Label] == "" || got.Labels[runtime.LabelOrg] != "" || got.Volume.Name != "scratch-sb_x" {
		t.Errorf("warm spec's name, labels, volume: %s %v %s", got.Name, got.Labels, got.Volume.Name)
	}
	got.Name, got.Labels, got.Volume.Name = own.Name, own.Labels, own.Volume.Name
	if !equalSpec(got, own) {
		t.Errorf("the warm spec %+v differs from a lease's %+v", got, own)
	}
}

func equalSpec(a, b runtime.Spec) bool {
	return a.Name == b.Name && a.Image == b.Image && a.Runtime == b.Runtime && a.Workdir == b.Workdir && a.Volume == b.Volume &&
		a.CPUs == b.CPUs && a.MemoryMiB == b.MemoryMiB && a.Pids == b.Pids && a.RootfsMiB == b.RootfsMiB && a.FileMiB == b.FileMiB &&
		a.Restore == b.Restore && a.User == b.User && a.Network == b.Network
}

// TestRecoverWarmCut: a server killed between a lease's row (pending, the
// warm sandbox's name) and its relabel leaves a warm-labelled object that
// the row claims; the recovery relabels it for its org and completes the
// lease, so the pool's purge of what is labelled warm spares it.
func TestRecoverWarmCut(t *testing.T) {
	h := newHarness(t)
	exec := sandbox.MustClass(sandbox.ClassExec)
	id, name := sandbox.NewID(), sandbox.NewName()
	obj, err := h.rt.Create(t.Context(), service.WarmSpec(exec, sandbox.RuntimeGVisor)(id, name))
	if err != nil {
		t.Fatal(err)
	}
	now := h.now()
	sb := &sandbox.Sandbox{ID: id, Name: name, Org: "acme", Class: exec.Name, Image: exec.Image, Runtime: sandbox.RuntimeGVisor,
		Workdir: exec.Workdir, Volume: "scratch-" + id, Status: sandbox.StatusPending, CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := h.st.Insert(acme, sb, nil); err != nil {
		t.Fatal(err)
	}
	res, err := h.svc.Recover(acme, map[string]runtime.Object{name: obj})
	if err != nil || res.Adopted != 1 {
		t.Fatalf("recover: %+v %v", res, err)
	}
	got, _ := h.rt.Status(t.Context(), name)
	if got.Labels[warm.Label] != "" || got.Labels[runtime.LabelOrg] != sandbox.Slug("acme") {
		t.Errorf("labels after the recovery: %v", got.Labels)
	}
	if row := h.row(acme, id); row.Status != sandbox.StatusRunning || row.UID != obj.UID {
		t.Errorf("row after the recovery: %+v", row)
	}
}

// oneWarm hands out one sandbox it was given and records what settled.
type oneWarm struct {
	mu      sync.Mutex
	w       *warm.Sandbox
	settled []string
}

func (o *oneWarm) Take(string, string) (warm.Sandbox, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w == nil {
		return warm.Sandbox{}, false
	}
	w := *o.w
	o.w = nil
	return w, true
}

func (o *oneWarm) Settled(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settled = append(o.settled, name)
}

// TestLeaseSkipsDeadWarm: a warm sandbox that waited long and died while
// it waited is not handed out: the lease starts its own, the dead one is
// deleted and settled with the pool.
func TestLeaseSkipsDeadWarm(t *testing.T) {
	pool := &oneWarm{}
	h := newHarness(t, func(_ *service.Config, d *service.Deps) { d.Warm = pool })
	exec := sandbox.MustClass(sandbox.ClassExec)
	spec := service.WarmSpec(exec, sandbox.RuntimeGVisor)("sb_deadwarm", "sbx-deadwarm")
	obj, err := h.rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.Put(obj.Name, obj.UID, "sb_deadwarm", obj.Created, false) // died
	pool.w = &warm.Sandbox{ID: "sb_deadwarm", Object: obj, Ready: time.Now().Add(-time.Hour)}
	sb := h.lease(acme, service.LeaseRequest{})
	if sb.Name == obj.Name || sb.Status != sandbox.StatusRunning {
		t.Fatalf("the lease took the dead warm sandbox: %+v", sb)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := h.rt.Status(t.Context(), obj.Name); errors.Is(err, runtime.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead warm sandbox was not deleted")
		}
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.settled) != 1 || pool.settled[0] != obj.Name {
		t.Errorf("settled %v, want [%s]", pool.settled, obj.Name)
	}
}
