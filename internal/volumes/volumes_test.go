package volumes_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/volumes"
)

func org(name string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: name, Subject: "test"})
}

type env struct {
	st   *store.Store
	rt   *fake.Runtime
	svc  *service.Service
	vols *volumes.Volumes
}

func newEnv(t *testing.T, startTimeout time.Duration) *env {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	vols := volumes.New(st, rt, nil)
	svc := service.New(service.Config{StartTimeout: startTimeout}, service.Deps{Store: st, Runtime: rt, Quotas: st, ProjectLocks: vols})
	return &env{st: st, rt: rt, svc: svc, vols: vols}
}

// TestVolumes: a project's volume is listed with its size and holder; its
// deletion is refused while a live sandbox holds it, is another org's
// 404, gives the volume back once the sandbox ended, and a backend that
// cannot delete keeps the project.
func TestVolumes(t *testing.T) {
	e := newEnv(t, 5*time.Second)
	acme := org("acme")
	sb, err := e.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "a"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.vols.List(acme)
	if err != nil || len(list) != 1 || list[0].Name != "a" || list[0].LiveSandbox != sb.ID || list[0].SizeMiB <= 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := e.vols.Delete(acme, "a"); sandbox.KindOf(err) != sandbox.KindConflict {
		t.Errorf("held by a live sandbox: %v", err)
	}
	if _, err := e.svc.End(acme, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx     context.Context
		project string
		kind    sandbox.Kind
	}{
		{org("globex"), "a", sandbox.KindNotFound},
		{acme, "nope", sandbox.KindNotFound},
		{acme, "../a", sandbox.KindInvalid},
	} {
		if _, err := e.vols.Delete(c.ctx, c.project); sandbox.KindOf(err) != c.kind {
			t.Errorf("delete %q: %v, want kind %v", c.project, err, c.kind)
		}
	}
	if _, err := e.vols.Delete(context.Background(), "a"); err == nil {
		t.Error("a delete with no org in its context")
	}

	vol := list[0].Volume
	res, err := e.vols.Delete(acme, "a")
	if err != nil || !res.Deleted || res.Project != "a" || res.FreedMiB != list[0].SizeMiB {
		t.Fatalf("delete: %+v %v", res, err)
	}
	for _, v := range e.rt.Volumes() {
		if v == vol {
			t.Errorf("volume %s left after its delete", v)
		}
	}
	if list, _ := e.vols.List(acme); len(list) != 0 {
		t.Errorf("after the delete: %+v", list)
	}
	if _, err := e.vols.Delete(acme, "a"); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("deleted twice: %v", err)
	}
}

// failingRuntime cannot delete a volume.
type failingRuntime struct{}

func (failingRuntime) DeleteVolume(context.Context, string) error { return errors.New("busy") }

func TestDeleteFails(t *testing.T) {
	e := newEnv(t, 5*time.Second)
	acme := org("acme")
	sb, err := e.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.End(acme, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := volumes.New(e.st, failingRuntime{}, nil).Delete(acme, "a"); sandbox.KindOf(err) != sandbox.KindUnavailable {
		t.Errorf("a backend that cannot delete: %v", err)
	}
	if list, _ := e.vols.List(acme); len(list) != 1 {
		t.Errorf("the project went with a failed delete: %+v", list)
	}
}

// TestLeaseHoldsTheProject: a lease of a project waits while its project
// is locked (a deletion in progress), and a deletion waits for a lease
// starting on the project, so a volume is never deleted under a sandbox
// starting on it; other projects and orgs do not wait.
func TestLeaseHoldsTheProject(t *testing.T) {
	e := newEnv(t, time.Second)
	acme := org("acme")
	unlock := e.vols.LockProject("acme", "a")
	leased := make(chan error, 1)
	go func() {
		_, err := e.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "a"})
		leased <- err
	}()
	if _, err := e.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "b"}); err != nil {
		t.Fatalf("another project: %v", err)
	}
	if _, err := e.svc.Lease(org("globex"), service.LeaseRequest{Class: "dev", Project: "a"}); err != nil {
		t.Fatalf("another org's project: %v", err)
	}
	select {
	case err := <-leased:
		t.Fatalf("the lease ran under the project's lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	if err := <-leased; err != nil {
		t.Fatal(err)
	}

	// And the other way: a lease that is starting holds the lock.
	e.rt.Set(func(r *fake.Runtime) { r.CreateWait = true })
	creates := len(e.rt.Calls())
	started := make(chan error, 1)
	go func() {
		_, err := e.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "c"})
		started <- err
	}()
	for !slices.ContainsFunc(e.rt.Calls()[creates:], func(c string) bool { return strings.HasPrefix(c, "create ") }) {
		time.Sleep(time.Millisecond) // until the lease is in Create, holding "c"
	}
	deleted := make(chan error, 1)
	go func() { _, err := e.vols.Delete(acme, "c"); deleted <- err }()
	select {
	case err := <-deleted:
		t.Fatalf("the delete ran while a lease started on the project: %v", err)
	case err := <-started:
		t.Fatalf("the lease ended before its start timed out: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The start times out (503); only then may the delete look.
	if err := <-started; sandbox.KindOf(err) != sandbox.KindUnavailable {
		t.Errorf("the start that used up its time: %v", err)
	}
	<-deleted
}
