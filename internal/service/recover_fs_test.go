package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// TestRecoverMatrix: every (row status, runtime object) pair a restart can
// find, and what Recover makes of it; the live gauge ends up counting what
// runs.
func TestRecoverMatrix(t *testing.T) {
	h := newHarness(t)
	insert := func(st sandbox.Status, uid string) *sandbox.Sandbox {
		now := h.now()
		sb := &sandbox.Sandbox{ID: sandbox.NewID(), Class: "exec", Status: sandbox.StatusPending, Image: "exec", Runtime: "gvisor",
			Workdir: "/mnt/data", Name: sandbox.NewName(), CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(time.Hour)}
		sb.Volume = "scratch-" + sb.ID
		if err := h.st.Insert(acme, sb, nil); err != nil {
			t.Fatal(err)
		}
		if st != sandbox.StatusPending {
			next := *sb
			next.Status, next.UID = st, uid
			if err := h.st.Transition(acme, sb.ID, sandbox.StatusPending, &next); err != nil {
				t.Fatal(err)
			}
		}
		return sb
	}
	adopted := insert(sandbox.StatusRunning, "u-run")
	h.rt.Put(adopted.Name, "u-run", adopted.ID, h.now(), true)
	gone := insert(sandbox.StatusRunning, "u-gone")
	replaced := insert(sandbox.StatusRunning, "u-old")
	h.rt.Put(replaced.Name, "u-new", replaced.ID, h.now(), true)
	stopped := insert(sandbox.StatusRunning, "u-stopped")
	h.rt.Put(stopped.Name, "u-stopped", stopped.ID, h.now(), false)
	interrupted := insert(sandbox.StatusPending, "")
	h.rt.Put(interrupted.Name, "u-half", interrupted.ID, h.now(), true)
	never := insert(sandbox.StatusPending, "")
	deadPending := insert(sandbox.StatusPending, "")
	h.rt.Put(deadPending.Name, "u-dead", deadPending.ID, h.now(), false)
	sleeping := insert(sandbox.StatusRunning, "u-s")
	h.st.Transition(acme, sleeping.ID, sandbox.StatusRunning, &sandbox.Sandbox{Status: sandbox.StatusSleeping, Name: sleeping.Name, UID: "u-s", Checkpoint: sleeping.ID})
	errored := insert(sandbox.StatusError, "")

	objs := map[string]runtime.Object{}
	list, err := h.rt.List(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		objs[o.Name] = o
	}
	res, err := h.svc.Recover(acme, objs)
	if err != nil {
		t.Fatal(err)
	}
	if res != (service.RecoverResult{Adopted: 2, Lost: 3, Failed: 2}) {
		t.Errorf("result %+v", res)
	}
	for _, tc := range []struct {
		name string
		sb   *sandbox.Sandbox
		want sandbox.Status
		obj  bool // the runtime object is still there
	}{
		{"running, container runs: adopted", adopted, sandbox.StatusRunning, true},
		{"running, container gone: sleeps", gone, sandbox.StatusSleeping, false},
		{"running, its name under another identity (a stray start): removed by that identity, sleeps", replaced, sandbox.StatusSleeping, false},
		{"running, container stopped: removed, sleeps", stopped, sandbox.StatusSleeping, false},
		{"pending, container runs: the lease is completed", interrupted, sandbox.StatusRunning, true},
		{"pending, never started: error", never, sandbox.StatusError, false},
		{"pending, container dead: removed, error", deadPending, sandbox.StatusError, false},
		{"sleeping: untouched", sleeping, sandbox.StatusSleeping, false},
		{"error: untouched", errored, sandbox.StatusError, false},
	} {
		got := h.row(acme, tc.sb.ID)
		_, obj := objs[tc.sb.Name]
		_, still := h.rt.Status(context.Background(), tc.sb.Name)
		if got.Status != tc.want || (still == nil) != tc.obj {
			t.Errorf("%s: status %s (want %s), object there: %v (want %v; listed: %v)", tc.name, got.Status, tc.want, still == nil, tc.obj, obj)
		}
	}
	if got := h.row(acme, interrupted.ID); got.UID != "u-half" {
		t.Errorf("adopted pending row has uid %q", got.UID)
	}
	if got := h.row(acme, sleeping.ID); got.Checkpoint == "" {
		t.Error("recover dropped a sleeping sandbox's checkpoint")
	}
	if h.live("exec") != 2 {
		t.Errorf("live gauge after recover: %v, want 2", h.live("exec"))
	}
}
