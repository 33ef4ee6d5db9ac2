package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// snapshot is everything a refused lease must leave as it found it.
type snapshot struct {
	rows, objects, volumes int
	balance                int64
}

func (h *harness) snapshot(ctx context.Context) snapshot {
	return snapshot{len(h.rows(ctx)), len(h.rt.Objects()), len(h.rt.Volumes()), h.balance("acme")}
}

// TestLeaseCheckOrder: each request below fails the check it names AND
// every later one (it asks for runc, which the runtime check refuses; the
// exec fee is above the balance; ...), so the answer shows which check ran
// first. Each refusal leaves no row, container, volume or fee behind.
func TestLeaseCheckOrder(t *testing.T) {
	h := newHarness(t, withFees(map[string]int64{"exec": 100}), func(_ *service.Config, d *service.Deps) {
		d.ImageReady = func(name string) error {
			if name == "desktop" {
				return errors.New("no rootfs")
			}
			return nil
		}
	})
	busy := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"}) // dev is free
	before := h.snapshot(acme)
	for _, tc := range []struct {
		name string
		req  service.LeaseRequest
		kind sandbox.Kind
		msg  string
	}{
		{"class known", service.LeaseRequest{Class: "gpu", Project: "p", Image: "x", Runtime: "runc"}, sandbox.KindInvalid, `unknown class "gpu": known classes are android, desktop, dev, exec`},
		{"image allowed", service.LeaseRequest{Class: "dev", Project: "p", Image: "exec", Runtime: "runc"}, sandbox.KindInvalid, `image "exec" is not allowed for class dev`},
		{"image built", service.LeaseRequest{Class: "desktop", Project: "p", Runtime: "runc"}, sandbox.KindInvalid, "is not built on this server"},
		{"project present", service.LeaseRequest{Class: "dev", Runtime: "runc"}, sandbox.KindInvalid, "class dev needs a project"},
		{"project valid", service.LeaseRequest{Class: "dev", Project: "../x", Runtime: "runc"}, sandbox.KindInvalid, `project "../x" is invalid`},
		{"project free", service.LeaseRequest{Class: "dev", Project: "p", Runtime: "runc"}, sandbox.KindConflict, busy.ID},
		{"fee", service.LeaseRequest{Runtime: "runc"}, sandbox.KindPayment, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.Lease(acme, tc.req)
			wantKind(t, err, tc.kind)
			if !strings.Contains(sandbox.Message(err), tc.msg) {
				t.Errorf("message %q, want it to contain %q", sandbox.Message(err), tc.msg)
			}
			if got := h.snapshot(acme); got != before {
				t.Errorf("the refusal left %+v behind (before: %+v)", got, before)
			}
		})
	}
	t.Run("runtime allowed, fee refunded", func(t *testing.T) {
		if _, err := h.st.Credit(context.Background(), "acme", 150); err != nil {
			t.Fatal(err)
		}
		before := h.snapshot(acme)
		_, err := h.svc.Lease(acme, service.LeaseRequest{Runtime: "runc"})
		wantKind(t, err, sandbox.KindInvalid)
		if got := h.snapshot(acme); got != before {
			t.Errorf("left %+v behind (before %+v): the fee must come back", got, before)
		}
		sb := h.lease(acme, service.LeaseRequest{})
		if h.balance("acme") != 50 || sb.Status != sandbox.StatusRunning {
			t.Errorf("a paid lease: balance %d, status %s", h.balance("acme"), sb.Status)
		}
	})
}

// TestLeaseCap: the 17th live exec sandbox of an org is a 429 with a retry
// hint, counted over the whole store (sleeping ones count), before the fee;
// another org is not affected; an ended one frees a place.
func TestLeaseCap(t *testing.T) {
	h := newHarness(t, withFees(map[string]int64{"exec": 0}))
	var ids []string
	for range 16 {
		ids = append(ids, h.lease(acme, service.LeaseRequest{}).ID)
	}
	if _, err := h.svc.Sleep(acme, ids[0]); err != nil {
		t.Fatal(err)
	}
	before := h.snapshot(acme)
	_, err := h.svc.Lease(acme, service.LeaseRequest{Runtime: "runc"})
	wantKind(t, err, sandbox.KindLimit)
	var e *sandbox.Error
	if !errors.As(err, &e) || e.RetryAfter <= 0 || !strings.Contains(e.Msg, "quota live exec sandboxes exceeded: limit 16, in use 16") {
		t.Errorf("cap refusal %+v", e)
	}
	if got := h.snapshot(acme); got != before {
		t.Errorf("the refusal left %+v behind", got)
	}
	h.lease(orgCtx("globex"), service.LeaseRequest{})
	if _, err := h.svc.End(acme, ids[0], false); err != nil {
		t.Fatal(err)
	}
	h.lease(acme, service.LeaseRequest{})
}

// TestLeaseStartFails: a container that cannot start leaves the row as
// error with a reason, no container, and the fee refunded; the answer is a
// 503 naming the row.
func TestLeaseStartFails(t *testing.T) {
	h := newHarness(t, withFees(map[string]int64{"exec": 10}))
	h.st.Credit(context.Background(), "acme", 10)
	h.rt.Set(func(r *fakeRT) { r.CreateErr = errors.New("runsc: boom") })
	_, err := h.svc.Lease(acme, service.LeaseRequest{})
	wantKind(t, err, sandbox.KindUnavailable)
	rows := h.rows(acme)
	if len(rows) != 1 || rows[0].Status != sandbox.StatusError || rows[0].Error == "" || !strings.Contains(sandbox.Message(err), rows[0].ID) {
		t.Fatalf("rows %+v after %v", rows, err)
	}
	if strings.Contains(sandbox.Message(err), "boom") {
		t.Errorf("internal detail in the answer: %q", sandbox.Message(err))
	}
	if len(h.rt.Objects()) != 0 || h.balance("acme") != 10 || h.live("exec") != 0 {
		t.Errorf("objects %v, balance %d, live %v", h.rt.Objects(), h.balance("acme"), h.live("exec"))
	}
	// The error row is ended (by the reaper, or a caller); it frees nothing
	// it did not hold.
	if _, err := h.svc.End(acme, rows[0].ID, false); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseClusterRefusals: a start the cluster refused answers its safe
// reason at once. For want of room it is a 503 with Retry-After that leaves
// nothing — no row, fee, or the project (and volume) the lease made, which
// the retry makes anew — but an older project; for any other reason the row
// is kept as error, with the cluster's reason.
func TestLeaseClusterRefusals(t *testing.T) {
	h := newHarness(t, withFees(map[string]int64{"dev": 10}))
	h.st.Credit(context.Background(), "acme", 100)
	noRoom := &runtime.StartError{Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu.", Capacity: true}
	h.rt.Set(func(r *fakeRT) { r.CreateErr = fmt.Errorf("kube: pod sbx-x cannot start: %w", noRoom) })
	projects := func() int {
		ps, err := h.st.Projects(acme)
		if err != nil {
			t.Fatal(err)
		}
		return len(ps)
	}
	_, err := h.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	wantKind(t, err, sandbox.KindUnavailable)
	var e *sandbox.Error
	if !errors.As(err, &e) || e.RetryAfter != 10 || e.Msg != "the cluster cannot place the sandbox now: 0/1 nodes are available: 1 Insufficient cpu; retry later" {
		t.Errorf("no room: %+v", e)
	}
	if n := len(h.rows(acme)); n != 0 || projects() != 0 || h.balance("acme") != 100 || len(h.rt.Objects()) != 0 || len(h.rt.Volumes()) != 0 {
		t.Errorf("no room left rows %d, projects %d, balance %d, objects %v, volumes %v", n, projects(), h.balance("acme"), h.rt.Objects(), h.rt.Volumes())
	}
	if c := h.rt.Calls(); !strings.HasPrefix(c[len(c)-1], "delete-volume project-") {
		t.Errorf("the new project's volume was not deleted: %v", c)
	}
	h.rt.Set(func(r *fakeRT) { r.CreateErr = nil })
	sb := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	if _, err := h.svc.End(acme, sb.ID, false); err != nil {
		t.Fatal(err)
	}

	// An older project is the caller's: it stays, volume and all.
	h.rt.Set(func(r *fakeRT) { r.CreateErr = noRoom })
	_, err = h.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	wantKind(t, err, sandbox.KindUnavailable)
	if n := len(h.rows(acme)); n != 0 || projects() != 1 || len(h.rt.Volumes()) != 1 || h.balance("acme") != 90 {
		t.Errorf("no room for an older project: rows %d, projects %d, volumes %v, balance %d", n, projects(), h.rt.Volumes(), h.balance("acme"))
	}

	// Not for want of room: the error row keeps the cluster's reason.
	unbound := &runtime.StartError{Reason: "Unschedulable", Message: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. (no StorageClass)"}
	h.rt.Set(func(r *fakeRT) { r.CreateErr = fmt.Errorf("kube: %w", unbound) })
	_, err = h.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	wantKind(t, err, sandbox.KindUnavailable)
	want := "the sandbox could not be started: the cluster says: Unschedulable: 0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. (no StorageClass)"
	rows := h.rows(acme)
	if !errors.As(err, &e) || e.RetryAfter != 0 || !strings.HasPrefix(e.Msg, want+"; it is kept as ") || len(rows) != 1 || rows[0].Status != sandbox.StatusError || rows[0].Error != want {
		t.Errorf("unbound claim: %+v; rows %+v", e, rows)
	}
	if _, err := h.svc.End(acme, rows[0].ID, false); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseStartUsesUpItsTime: a start that runs to its own deadline still
// records its failure (the row is error, not pending): the write that
// records it has a deadline of its own, counted after the start. (It was
// once counted from before the start, and a 60 s start outlived the 30 s
// record: here 50 ms and 20 ms.)
func TestLeaseStartUsesUpItsTime(t *testing.T) {
	defer service.SetRecordTimeout(20 * time.Millisecond)()
	h := newHarness(t, func(c *service.Config, _ *service.Deps) { c.StartTimeout = 50 * time.Millisecond })
	h.rt.Set(func(r *fakeRT) { r.CreateWait = true })
	_, err := h.svc.Lease(acme, service.LeaseRequest{})
	wantKind(t, err, sandbox.KindUnavailable)
	rows := h.rows(acme)
	if len(rows) != 1 || rows[0].Status != sandbox.StatusError {
		t.Fatalf("after a start that used up its time: %+v", rows[0])
	}
}

// TestLeaseCallerHangsUp: a caller that goes away mid-start does not leave
// a half-started sandbox: the start finishes and is recorded.
func TestLeaseCallerHangsUp(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(acme)
	cancel()
	sb, err := h.svc.Lease(ctx, service.LeaseRequest{})
	if err == nil {
		if got := h.row(acme, sb.ID); got.Status != sandbox.StatusRunning {
			t.Errorf("status %s", got.Status)
		}
		return
	}
	// Refused before the row: nothing at all.
	if len(h.rows(acme)) != 0 || len(h.rt.Objects()) != 0 {
		t.Errorf("a refused lease left %v rows, %v objects", h.rows(acme), h.rt.Objects())
	}
}

// TestLeaseSpec: the runtime gets the class limits, the sandbox label, the
// org label and the volume; the row carries what the answer says.
func TestLeaseSpec(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "app", TTLSec: 60})
	row := h.row(acme, sb.ID)
	spec, ok := h.rt.Spec(row.Name)
	if !ok {
		t.Fatal("no container for the row")
	}
	dev := sandbox.MustClass("dev")
	switch {
	case spec.Labels[runtime.LabelSandbox] != sb.ID || spec.Labels[runtime.LabelOrg] != sandbox.Slug("acme"):
		t.Errorf("labels %v", spec.Labels)
	case spec.CPUs != dev.Limits.CPUs || spec.MemoryMiB != dev.Limits.MemoryMiB || spec.Workdir != "/work" || spec.Volume.Scratch:
		t.Errorf("spec %+v", spec)
	case !sb.ExpiresAt.Equal(h.now().Add(time.Minute)) || row.UID == "" || sb.Status != sandbox.StatusRunning:
		t.Errorf("sandbox %+v", sb)
	case h.live("dev") != 1:
		t.Errorf("live gauge %v", h.live("dev"))
	}
	// The same project's volume for the same org, another for another org.
	if _, err := h.svc.End(acme, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	again := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "app"})
	other := h.lease(orgCtx("globex"), service.LeaseRequest{Class: "dev", Project: "app"})
	if h.row(acme, again.ID).Volume != row.Volume || h.row(orgCtx("globex"), other.ID).Volume == row.Volume {
		t.Errorf("project volumes: %s, %s, %s", row.Volume, h.row(acme, again.ID).Volume, h.row(orgCtx("globex"), other.ID).Volume)
	}
}
