package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

func TestEnd(t *testing.T) {
	t.Run("exec: container, scratch volume and row go", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{})
		res, err := h.svc.End(acme, sb.ID, false)
		if err != nil || !res.Ended || res.Purged {
			t.Fatalf("%+v %v", res, err)
		}
		if len(h.rows(acme)) != 0 || len(h.rt.Objects()) != 0 || len(h.rt.Volumes()) != 0 || h.live("exec") != 0 {
			t.Errorf("rows %v objects %v volumes %v live %v", h.rows(acme), h.rt.Objects(), h.rt.Volumes(), h.live("exec"))
		}
		_, err = h.svc.End(acme, sb.ID, false)
		wantKind(t, err, sandbox.KindNotFound)
	})
	t.Run("project volume kept, purge drops it", func(t *testing.T) {
		h := newHarness(t)
		a := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
		if _, err := h.svc.End(acme, a.ID, false); err != nil {
			t.Fatal(err)
		}
		if len(h.rt.Volumes()) != 1 {
			t.Fatalf("volumes after end: %v", h.rt.Volumes())
		}
		b := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
		res, err := h.svc.End(acme, b.ID, true)
		if err != nil || !res.Purged || len(h.rt.Volumes()) != 0 {
			t.Fatalf("%+v %v volumes %v", res, err, h.rt.Volumes())
		}
	})
	t.Run("another org's id is not found and touches nothing", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{})
		_, err := h.svc.End(orgCtx("globex"), sb.ID, true)
		wantKind(t, err, sandbox.KindNotFound)
		_, err = h.svc.End(acme, "sb_nope", false)
		wantKind(t, err, sandbox.KindNotFound)
		if len(h.rt.Objects()) != 1 || len(h.rows(acme)) != 1 {
			t.Error("a foreign end touched the sandbox")
		}
	})
	t.Run("pending: refused while its lease call owns it, ended once stuck", func(t *testing.T) {
		h := newHarness(t, func(c *service.Config, _ *service.Deps) { c.StartTimeout = 200 * time.Millisecond })
		h.rt.Set(func(r *fakeRT) { r.CreateWait = true })
		leased := make(chan struct{})
		go func() {
			h.svc.Lease(acme, service.LeaseRequest{})
			close(leased)
		}()
		var row *sandbox.Sandbox
		for row == nil {
			if rows := h.rows(acme); len(rows) == 1 {
				row = rows[0]
			}
			time.Sleep(time.Millisecond)
		}
		_, err := h.svc.End(acme, row.ID, false)
		wantKind(t, err, sandbox.KindConflict)
		<-leased
		if got := h.row(acme, row.ID); got.Status != sandbox.StatusError {
			t.Errorf("a start past its time: %s", got.Status)
		}
		// A pending row stuck past every start is the reaper's to end.
		stuck := &sandbox.Sandbox{ID: sandbox.NewID(), Class: "exec", Status: sandbox.StatusPending, Image: "exec", Runtime: "gvisor",
			Workdir: "/mnt/data", Name: sandbox.NewName(), Volume: "scratch-x", CreatedAt: h.now().Add(-2 * time.Hour), LastUsedAt: h.now(), ExpiresAt: h.now()}
		if err := h.st.Insert(acme, stuck, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := h.svc.End(acme, stuck.ID, false); err != nil {
			t.Errorf("stuck pending: %v", err)
		}
	})
	t.Run("container that cannot be removed keeps the row", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{})
		h.rt.Set(func(r *fakeRT) { r.DeleteErr = errors.New("runsc: busy") })
		_, err := h.svc.End(acme, sb.ID, false)
		wantKind(t, err, sandbox.KindUnavailable)
		if got := h.row(acme, sb.ID); got.Status != sandbox.StatusRunning || h.live("exec") != 1 {
			t.Errorf("row %s, live %v", got.Status, h.live("exec"))
		}
		h.rt.Set(func(r *fakeRT) { r.DeleteErr = nil })
		if _, err := h.svc.End(acme, sb.ID, false); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("identity changed: never deleted, the row goes", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{})
		row := h.row(acme, sb.ID)
		h.rt.Die(row.Name)
		h.rt.Put(row.Name, "someone-else", "sb_other", h.now(), true)
		if _, err := h.svc.End(acme, sb.ID, false); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(h.rt.Objects(), row.Name) {
			t.Error("deleted an object of another identity")
		}
	})
}

func TestSleepWake(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	first := h.row(acme, sb.ID)
	slept, err := h.svc.Sleep(acme, sb.ID)
	if err != nil || slept.Status != sandbox.StatusSleeping || !slept.MemoryKept {
		t.Fatalf("sleep: %+v %v", slept, err)
	}
	if len(h.rt.Objects()) != 0 || len(h.rt.Checkpoints()) != 1 || h.live("dev") != 0 || len(h.rt.Volumes()) != 1 {
		t.Fatalf("asleep: objects %v checkpoints %v live %v", h.rt.Objects(), h.rt.Checkpoints(), h.live("dev"))
	}
	// A sleeping sandbox holds its project.
	_, err = h.svc.Lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	wantKind(t, err, sandbox.KindConflict)
	// Sleeping again is answered as is.
	if again, err := h.svc.Sleep(acme, sb.ID); err != nil || again.Status != sandbox.StatusSleeping {
		t.Fatalf("second sleep: %+v %v", again, err)
	}
	// Any use wakes it, under a new name, from its memory.
	res, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "true"}, nil, nil)
	if err != nil || !res.Woken {
		t.Fatalf("exec on a sleeping sandbox: %+v %v", res, err)
	}
	woken := h.row(acme, sb.ID)
	spec, _ := h.rt.Spec(woken.Name)
	if woken.Status != sandbox.StatusRunning || woken.Name == first.Name || woken.Checkpoint != "" || spec.Restore != sb.ID ||
		len(h.rt.Checkpoints()) != 0 || h.live("dev") != 1 {
		t.Errorf("woken row %+v, restored from %q, checkpoints %v, live %v", woken, spec.Restore, h.rt.Checkpoints(), h.live("dev"))
	}
	// Wake of a running one is a no-op.
	if r, err := h.svc.Wake(acme, sb.ID); err != nil || r.Woken {
		t.Errorf("resume running: %+v %v", r, err)
	}
}

func TestSleepFallbacks(t *testing.T) {
	t.Run("no checkpoint: sleeps without memory, wakes fresh", func(t *testing.T) {
		h := newHarness(t, without(runtime.CapCheckpoint))
		sb := h.lease(acme, service.LeaseRequest{})
		slept, err := h.svc.Sleep(acme, sb.ID)
		if err != nil || slept.MemoryKept || len(h.rt.Objects()) != 0 {
			t.Fatalf("%+v %v %v", slept, err, h.rt.Objects())
		}
		woken, err := h.svc.Wake(acme, sb.ID)
		if err != nil || !woken.Woken || woken.MemoryKept {
			t.Fatalf("%+v %v", woken, err)
		}
	})
	t.Run("restore fails: starts fresh, files kept", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
		h.svc.Sleep(acme, sb.ID)
		h.rt.Set(func(r *fakeRT) { r.RestoreErr = errors.New("restore: bad image") })
		woken, err := h.svc.Wake(acme, sb.ID)
		if err != nil || woken.MemoryKept || woken.Status != sandbox.StatusRunning || len(h.rt.Checkpoints()) != 0 {
			t.Fatalf("%+v %v checkpoints %v", woken, err, h.rt.Checkpoints())
		}
	})
	t.Run("wake fails: 503, still sleeping", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{})
		h.svc.Sleep(acme, sb.ID)
		h.rt.Set(func(r *fakeRT) { r.CreateErr = errors.New("no memory") })
		_, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "true"}, nil, nil)
		wantKind(t, err, sandbox.KindUnavailable)
		if got := h.row(acme, sb.ID); got.Status != sandbox.StatusSleeping || got.Checkpoint == "" {
			t.Errorf("row after a failed wake: %+v", got)
		}
	})
	t.Run("the cluster refuses the wake: its reason, still sleeping", func(t *testing.T) {
		h := newHarness(t, without(runtime.CapCheckpoint))
		sb := h.lease(acme, service.LeaseRequest{})
		h.svc.Sleep(acme, sb.ID)
		for _, tc := range []struct {
			se         *runtime.StartError
			msg        string
			retryAfter int
		}{
			{&runtime.StartError{Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory.", Capacity: true},
				"the cluster cannot place the sandbox now: 0/1 nodes are available: 1 Insufficient memory; it sleeps on, retry later", 10},
			{&runtime.StartError{Reason: "ErrImageNeverPull", Message: `Container image "sandbox/exec:local" is not present with pull policy of Never`},
				`the sandbox could not be woken: the cluster says: ErrImageNeverPull: Container image "sandbox/exec:local" is not present with pull policy of Never; try again`, 0},
		} {
			h.rt.Set(func(r *fakeRT) { r.CreateErr = tc.se })
			_, err := h.svc.Wake(acme, sb.ID)
			var e *sandbox.Error
			if !errors.As(err, &e) || e.Kind != sandbox.KindUnavailable || e.Msg != tc.msg || e.RetryAfter != tc.retryAfter {
				t.Errorf("wake refused: %+v, want %q (retry after %d)", e, tc.msg, tc.retryAfter)
			}
			if got := h.row(acme, sb.ID); got.Status != sandbox.StatusSleeping {
				t.Errorf("row after a refused wake: %+v", got)
			}
		}
	})
	t.Run("container cannot be removed: still running", func(t *testing.T) {
		h := newHarness(t)
		sb := h.lease(acme, service.LeaseRequest{})
		h.rt.Set(func(r *fakeRT) { r.CheckpointErr = errors.New("checkpoint: no"); r.DeleteErr = errors.New("busy") })
		_, err := h.svc.Sleep(acme, sb.ID)
		wantKind(t, err, sandbox.KindUnavailable)
		if got := h.row(acme, sb.ID); got.Status != sandbox.StatusRunning || h.live("exec") != 1 {
			t.Errorf("row %s live %v", got.Status, h.live("exec"))
		}
	})
	t.Run("error row: refused", func(t *testing.T) {
		h := newHarness(t)
		h.rt.Set(func(r *fakeRT) { r.CreateErr = errors.New("x") })
		h.svc.Lease(acme, service.LeaseRequest{})
		id := h.rows(acme)[0].ID
		_, err := h.svc.Sleep(acme, id)
		wantKind(t, err, sandbox.KindConflict)
		_, err = h.svc.Exec(acme, id, service.ExecRequest{Command: "true"}, nil, nil)
		wantKind(t, err, sandbox.KindConflict)
		_, err = h.svc.Renew(acme, id, 60)
		wantKind(t, err, sandbox.KindConflict)
	})
}

// TestSleepWithWorkInFlight: a sleep never takes the container from under
// a running command: it backs off with 409 and the sandbox runs on.
func TestSleepWithWorkInFlight(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{})
	started := make(chan struct{}, 1)
	h.rt.SetExec(fake.Block(started))
	done := make(chan error, 1)
	go func() {
		_, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "sleep 100"}, nil, nil)
		done <- err
	}()
	<-started
	_, err := h.svc.Sleep(acme, sb.ID)
	wantKind(t, err, sandbox.KindConflict)
	if !strings.Contains(sandbox.Message(err), "1 commands running") {
		t.Errorf("message %q", sandbox.Message(err))
	}
	if got := h.row(acme, sb.ID); got.Status != sandbox.StatusRunning || len(h.rt.Objects()) != 1 || h.live("exec") != 1 {
		t.Errorf("after a refused sleep: %s, objects %v, live %v", got.Status, h.rt.Objects(), h.live("exec"))
	}
	// Stop ends the work (137, stopped), the sandbox stays.
	st, err := h.svc.Stop(acme, sb.ID)
	if err != nil || st.Stopped != 1 {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a stopped command is a result: %v", err)
	}
	if _, err := h.svc.Sleep(acme, sb.ID); err != nil {
		t.Errorf("sleep once idle: %v", err)
	}
}

func TestExecOutcomes(t *testing.T) {
	h := newHarness(t, func(c *service.Config, _ *service.Deps) { c.MaxExecTimeout = time.Second })
	sb := h.lease(acme, service.LeaseRequest{})
	h.rt.SetExec(fake.Exit(3, "out"))
	res, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Argv: []string{"false"}}, nil, nil)
	if err != nil || res.ExitCode != 3 || res.Stdout != "out" || res.TimedOut || res.Stopped {
		t.Errorf("exit 3: %+v %v", res, err)
	}
	h.rt.SetExec(fake.Block(nil))
	res, err = h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "sleep 9", TimeoutSec: 99}, nil, nil)
	if err != nil || res.ExitCode != 124 || !res.TimedOut || !strings.Contains(res.Stderr, "killed after the 1s timeout") {
		t.Errorf("timeout (capped at the server's 1 s): %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(acme, 20*time.Millisecond)
	defer cancel()
	_, err = h.svc.Exec(ctx, sb.ID, service.ExecRequest{Command: "sleep 9"}, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller gone: %v", err)
	}
	for _, bad := range []service.ExecRequest{
		{}, {Argv: []string{"a\x00b"}}, {Command: "x", TimeoutSec: -1}, {Command: "x", Env: map[string]string{"1X": "y"}},
		{Command: "x", Dir: "../etc"}, {Command: "x", Session: "-bad"}, {Command: "x", Redact: make([]string, 1000)},
	} {
		_, err := h.svc.Exec(acme, sb.ID, bad, nil, nil)
		wantKind(t, err, sandbox.KindInvalid)
	}
	_, err = h.svc.Exec(orgCtx("globex"), sb.ID, service.ExecRequest{Command: "x"}, nil, nil)
	wantKind(t, err, sandbox.KindNotFound)
	// The runtime got what the request said.
	var got runtime.ExecRequest
	h.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error { got = req; return nil })
	h.svc.Exec(acme, sb.ID, service.ExecRequest{Argv: []string{"env"}, Dir: "src", Env: map[string]string{"A": "1"}}, nil, nil)
	if got.Dir != "/mnt/data/src" || !slices.Equal(got.Env, []string{"A=1"}) || !slices.Equal(got.Argv, []string{"env"}) {
		t.Errorf("runtime request %+v", got)
	}
}

// TestDied: a broken channel of a sandbox whose container is gone puts it
// to sleep without memory (files kept; the next call starts it), and says
// so; one whose container still runs is a plain 502.
func TestDied(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{Class: "dev", Project: "p"})
	h.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error { return fake.ErrBroken })
	_, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "x"}, nil, nil)
	wantKind(t, err, sandbox.KindBadGateway)
	if got := h.row(acme, sb.ID); got.Status != sandbox.StatusRunning {
		t.Fatalf("a live container's sandbox was put to sleep: %s", got.Status)
	}
	h.rt.Die(h.row(acme, sb.ID).Name)
	_, err = h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "x"}, nil, nil)
	wantKind(t, err, sandbox.KindBadGateway)
	if !strings.Contains(sandbox.Message(err), "the sandbox died") {
		t.Errorf("message %q", sandbox.Message(err))
	}
	if got := h.row(acme, sb.ID); got.Status != sandbox.StatusSleeping || got.Checkpoint != "" || h.live("dev") != 0 {
		t.Fatalf("after a death: %+v live %v", got, h.live("dev"))
	}
	h.rt.SetExec(nil)
	res, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "true"}, nil, nil)
	if err != nil || !res.Woken || h.live("dev") != 1 {
		t.Errorf("next call: %+v %v live %v", res, err, h.live("dev"))
	}
}

func TestRenew(t *testing.T) {
	h := newHarness(t, func(c *service.Config, _ *service.Deps) { c.Ceiling = 2 * time.Hour })
	sb := h.lease(acme, service.LeaseRequest{})
	h.advance(time.Minute)
	got, err := h.svc.Renew(acme, sb.ID, 600)
	if err != nil || !got.ExpiresAt.Equal(h.now().Add(10*time.Minute)) {
		t.Fatalf("%v %v", got.ExpiresAt, err)
	}
	got, _ = h.svc.Renew(acme, sb.ID, 1<<62)
	if !got.ExpiresAt.Equal(sb.CreatedAt.Add(2 * time.Hour)) {
		t.Errorf("past the ceiling: %v", got.ExpiresAt)
	}
	if h.row(acme, sb.ID).ExpiresAt != got.ExpiresAt {
		t.Error("renew not stored")
	}
}

// TestOtherOrgWaitsOnNothing: a call of another org naming a sandbox's id
// is a 404 at once while the owner's step holds the sandbox (a sleep's
// checkpoint, say): it neither waits on the owner's lock (a delay that
// would tell the id exists) nor holds it.
func TestOtherOrgWaitsOnNothing(t *testing.T) {
	h := newHarness(t)
	sb := h.lease(acme, service.LeaseRequest{})
	unlock := h.svc.HoldLock(acme, sb.ID)
	defer unlock()
	other := orgCtx("globex")
	for name, call := range map[string]func(context.Context) error{
		"end":     func(ctx context.Context) error { _, err := h.svc.End(ctx, sb.ID, false); return err },
		"sleep":   func(ctx context.Context) error { _, err := h.svc.Sleep(ctx, sb.ID); return err },
		"network": func(ctx context.Context) error { _, err := h.svc.SetNetwork(ctx, sb.ID, nil); return err },
	} {
		ctx, cancel := context.WithTimeout(other, 2*time.Second)
		t0 := time.Now()
		err := call(ctx)
		cancel()
		if sandbox.KindOf(err) != sandbox.KindNotFound || time.Since(t0) > time.Second {
			t.Errorf("%s of another org's id: %v after %v, want a 404 at once", name, err, time.Since(t0))
		}
	}
}

// statusFails is a backend whose Status cannot answer (an API server's 503).
type statusFails struct{ *fake.Runtime }

func (statusFails) Status(context.Context, string) (runtime.Object, error) {
	return runtime.Object{}, errors.New("the server is currently unable to handle the request")
}

// TestDiedNotWhenUnsure: a broken channel whose backend cannot say whether
// the container runs (the API server's trouble breaks both) is a plain
// 502: the sandbox is not put to sleep, its container not deleted.
func TestDiedNotWhenUnsure(t *testing.T) {
	h := newHarness(t, func(_ *service.Config, d *service.Deps) { d.Runtime = statusFails{d.Runtime.(*fake.Runtime)} })
	sb := h.lease(acme, service.LeaseRequest{})
	h.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error { return fake.ErrBroken })
	_, err := h.svc.Exec(acme, sb.ID, service.ExecRequest{Command: "x"}, nil, nil)
	wantKind(t, err, sandbox.KindBadGateway)
	row := h.row(acme, sb.ID)
	if row.Status != sandbox.StatusRunning {
		t.Errorf("a sandbox the backend could not see was put to sleep: %s", row.Status)
	}
	if _, err := h.rt.Status(t.Context(), row.Name); err != nil {
		t.Errorf("its container was deleted: %v", err)
	}
}
