package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

func ptr[T any](v T) *T { return &v }

func (h *harness) setQuota(org string, p quota.Policy) {
	h.t.Helper()
	if err := h.st.SetOrgQuota(context.Background(), org, p); err != nil {
		h.t.Fatal(err)
	}
}

func wantRefusal(t *testing.T, err error, kind sandbox.Kind, msg string) {
	t.Helper()
	wantKind(t, err, kind)
	var e *sandbox.Error
	errors.As(err, &e)
	if !strings.Contains(sandbox.Message(err), msg) || kind == sandbox.KindLimit && e.RetryAfter <= 0 {
		t.Errorf("refusal %q (retry %d), want it to say %q", sandbox.Message(err), e.RetryAfter, msg)
	}
}

// TestQuotaProjectsAndDisk: a project the org cannot keep is a 403 that
// names the quota; the project it has is leased again freely; deleting a
// volume gives its disk back.
func TestQuotaProjectsAndDisk(t *testing.T) {
	h := newHarness(t)
	h.setQuota("acme", quota.Policy{Projects: ptr(1)})
	a := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "a"})
	before := h.snapshot(acme)
	_, err := h.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "b"})
	wantRefusal(t, err, sandbox.KindQuota, "quota projects exceeded: limit 1, in use 1, this needs 1 more")
	if got := h.snapshot(acme); got != before {
		t.Errorf("the refusal left %+v (before %+v)", got, before)
	}
	// Another org is not affected.
	h.lease(orgCtx("globex"), service.LeaseRequest{Class: "dev", Project: "b"})

	_, err = h.vols.Delete(acme, "a")
	wantKind(t, err, sandbox.KindConflict) // held by a live sandbox
	if _, err := h.svc.End(acme, a.ID, false); err != nil {
		t.Fatal(err)
	}
	h.lease(acme, service.LeaseRequest{Class: "dev", Project: "a"}) // its own project: no new one
	for _, sb := range h.rows(acme) {
		h.svc.End(acme, sb.ID, false)
	}
	vols, _ := h.vols.List(acme)
	if len(vols) != 1 || vols[0].Name != "a" || vols[0].SizeMiB != 10240 {
		t.Fatalf("volumes %+v", vols)
	}
	_, err = h.vols.Delete(orgCtx("globex"), "a")
	wantKind(t, err, sandbox.KindNotFound)
	res, err := h.vols.Delete(acme, "a")
	if err != nil || !res.Deleted || res.FreedMiB != 10240 {
		t.Fatalf("delete: %+v %v", res, err)
	}
	for _, v := range h.rt.Volumes() {
		if strings.HasPrefix(v, "project-") && v == h.rows(orgCtx("globex"))[0].Volume {
			continue
		}
		t.Errorf("volume %s left after its delete", v)
	}
	h.lease(acme, service.LeaseRequest{Class: "dev", Project: "b"})

	// Disk: two 10 GiB volumes do not fit 15 GiB.
	h.setQuota("globex", quota.Policy{DiskMiB: ptr(int64(15 << 10))})
	_, err = h.svc.Lease(orgCtx("globex"), service.LeaseRequest{Class: "dev", Project: "c"})
	wantRefusal(t, err, sandbox.KindQuota, "quota diskMiB exceeded")
	// A purge gives it back.
	g := h.rows(orgCtx("globex"))[0]
	if _, err := h.svc.End(orgCtx("globex"), g.ID, true); err != nil {
		t.Fatal(err)
	}
	h.lease(orgCtx("globex"), service.LeaseRequest{Class: "dev", Project: "c"})
}

// TestQuotaCPUAndWake: the CPU a start reserves is a 429 (waiting helps);
// a sleeping sandbox reserves none, and its wake is checked again.
func TestQuotaCPUAndWake(t *testing.T) {
	h := newHarness(t)
	h.setQuota("acme", quota.Policy{CPUs: ptr(2.0)})
	dev := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"}) // 2 CPUs
	_, err := h.svc.Lease(acme, service.LeaseRequest{})
	wantRefusal(t, err, sandbox.KindLimit, "quota cpus exceeded: limit 2, in use 2, this needs 1 more")
	if _, err := h.svc.Sleep(acme, dev.ID); err != nil {
		t.Fatal(err)
	}
	ex := h.lease(acme, service.LeaseRequest{}) // 1 CPU
	_, err = h.svc.Wake(acme, dev.ID)
	wantRefusal(t, err, sandbox.KindLimit, "quota cpus exceeded")
	if got := h.row(acme, dev.ID); got.Status != sandbox.StatusSleeping || got.Checkpoint == "" {
		t.Errorf("a refused wake changed the row: %+v", got)
	}
	h.svc.End(acme, ex.ID, false)
	if _, err := h.svc.Wake(acme, dev.ID); err != nil {
		t.Errorf("wake once the CPU is free: %v", err)
	}
}

// TestQuotaCommands: the org's concurrent commands are bounded (429 with a
// short retry); a renew is not a command; another org is not affected.
func TestQuotaCommands(t *testing.T) {
	h := newHarness(t)
	h.setQuota("acme", quota.Policy{Commands: ptr(1)})
	sb := h.lease(acme, service.LeaseRequest{})
	other := h.lease(orgCtx("globex"), service.LeaseRequest{})
	started := make(chan struct{}, 1)
	h.rt.SetExec(fake.Block(started))
	done := make(chan struct{})
	go func() {
		h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "sleep 9"}, nil, nil)
		close(done)
	}()
	<-started
	_, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "true"}, nil, nil)
	wantRefusal(t, err, sandbox.KindLimit, "quota commands exceeded: limit 1, in use 1")
	_, err = h.files.Read(acme, sb.ID, "x", 0)
	wantKind(t, err, sandbox.KindLimit)
	_, err = h.report.Acquire(acme)
	wantKind(t, err, sandbox.KindLimit)
	if _, err := h.svc.Renew(acme, sb.ID, 60); err != nil {
		t.Errorf("renew under a full commands quota: %v", err)
	}
	lines, _ := h.report.QuotaLines(acme)
	for _, l := range lines {
		if l.Name == quota.NameCommands && (l.Used != 1 || l.Limit != 1) {
			t.Errorf("commands line %+v", l)
		}
	}
	h.rt.SetExec(nil)
	if _, err := h.svc.Exec(orgCtx("globex"), other.ID, service.ExecRequest{Command: "true"}, nil, nil); err != nil {
		t.Errorf("another org: %v", err)
	}
	h.svc.Stop(acme, sb.ID)
	<-done
	if _, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "true"}, nil, nil); err != nil {
		t.Errorf("after the command ended: %v", err)
	}
}

type lowHost struct{ mem, disk int64 }

func (h lowHost) Headroom(context.Context) (int64, int64, error) { return h.mem, h.disk, nil }

// TestHostAdmission: a start the host has no headroom for is a 503 with a
// retry hint, leaving nothing; the numbers stay in the log.
func TestHostAdmission(t *testing.T) {
	host := &lowHost{mem: 4096, disk: 1 << 20}
	h := newHarness(t, func(c *service.Config, d *service.Deps) {
		c.ReserveMemoryMiB, c.ReserveDiskMiB = 512, 1024
		d.Host = host
	})
	ex := h.lease(acme, service.LeaseRequest{}) // 1 GiB + 512 MiB fits 4 GiB
	before := h.snapshot(acme)
	_, err := h.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "p"}) // 4 GiB + 512 MiB does not
	wantRefusal(t, err, sandbox.KindUnavailable, "the server is short of memory for a dev sandbox")
	if strings.Contains(sandbox.Message(err), "4096") {
		t.Errorf("host numbers in the answer: %q", sandbox.Message(err))
	}
	var e *sandbox.Error
	if errors.As(err, &e); e.RetryAfter <= 0 {
		t.Error("no retry hint")
	}
	if got := h.snapshot(acme); got != before {
		t.Errorf("left %+v", got)
	}
	h.svc.Sleep(acme, ex.ID)
	host.disk = 100
	_, err = h.svc.Wake(acme, ex.ID)
	wantRefusal(t, err, sandbox.KindUnavailable, "short of disk space")
}

// TestMapsDoNotGrow: ends, sleeps and commands on ids that are unknown or
// another org's leave no entry behind in the per-id lock and in-flight
// maps.
func TestMapsDoNotGrow(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{})
	for range 500 {
		id := sandbox.NewID()
		h.svc.End(acme, id, false)
		h.svc.Sleep(acme, id)
		h.svc.Exec(acme, id, service.ExecRequest{Command: "x"}, nil, nil)
		h.svc.End(orgCtx("globex"), sb.ID, false)
		h.svc.Exec(orgCtx("globex"), sb.ID, service.ExecRequest{Command: "x"}, nil, nil)
	}
	h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "true"}, nil, nil)
	h.svc.End(acme, sb.ID, false)
	if l, s, o := h.svc.MapSizes(); l != 0 || s != 0 || o != 0 {
		t.Errorf("maps hold %d locks, %d sandboxes, %d orgs", l, s, o)
	}
}
