package integration_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/warm"
)

// warmObjects are the runtime's objects labelled warm, by name.
func warmObjects(t testing.TB, e *env) []string {
	t.Helper()
	objs, err := e.srv.Runtime.List(t.Context(), map[string]string{warm.Label: ""})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		if o.Running {
			names = append(names, o.Name)
		}
	}
	return names
}

// waitWarm waits until the runtime holds want running warm sandboxes, none
// of them in gone.
func waitWarm(t testing.TB, e *env, want int, gone ...string) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		names := warmObjects(t, e)
		if len(names) == want && !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(gone, n) }) {
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm sandboxes %v, want %d and none of %v", names, want, gone)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWarmPool, on real gVisor: the server's Run deletes a previous
// server's warm sandbox and starts its own; a plain lease is handed it
// (the same id, relabelled for its org, its credential and commands work)
// while the pool starts a successor; a lease with a project starts its own;
// the sweep spares what the pool holds; stopping Run deletes the pool's
// sandboxes and only those.
func TestWarmPool(t *testing.T) {
	e := newEnvConfig(t, server.Config{Warm: warm.Config{Size: 1}})
	exec := sandbox.MustClass(sandbox.ClassExec)
	stray, err := e.srv.Runtime.Create(t.Context(), service.WarmSpec(exec, sandbox.RuntimeGVisor)(sandbox.NewID(), sandbox.NewName()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.srv.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)

	first := waitWarm(t, e, 1, stray.Name)[0]
	obj, err := e.srv.Runtime.Status(t.Context(), first)
	if err != nil {
		t.Fatal(err)
	}
	id := e.lease("acme", map[string]any{"class": "exec"})
	if id != obj.Labels[runtime.LabelSandbox] {
		t.Fatalf("the lease %s did not take the warm sandbox %s (%s)", id, first, obj.Labels[runtime.LabelSandbox])
	}
	got, err := e.srv.Runtime.Status(t.Context(), first)
	if err != nil || got.Labels[runtime.LabelOrg] != sandbox.Slug("acme") || got.Labels[warm.Label] != "" || !got.Running {
		t.Fatalf("the taken sandbox: %+v %v", got, err)
	}
	// Its own credential, written after it was taken, and a command.
	// Its relay was started while it waited: the credential was written on
	// it, and the API socket is there for the first command.
	if out := e.sh("acme", id, `test -s /run/sandbox/token && test -S /run/sandbox/api.sock && echo token; node -v`); !strings.Contains(out, "token") || !strings.HasPrefix(strings.Split(out, "\n")[1], "v") {
		t.Errorf("in the taken sandbox: %q", out)
	}
	second := waitWarm(t, e, 1, first)[0]

	// (A project, not a network: a network with no uplink configured would
	// put the egress table in this host's namespace.)
	proj := e.lease("acme", map[string]any{"class": "exec", "project": "p1"})
	if !slices.Contains(warmObjects(t, e), second) {
		t.Errorf("a lease with a project took the warm sandbox (%s)", proj)
	}
	// A sweep that finds every object old enough spares the pool's.
	sweep := &reaper.Reaper{Config: reaper.Config{Grace: time.Nanosecond}, Store: e.srv.Reaper.Store, Runtime: e.srv.Reaper.Runtime,
		Keep: e.srv.Reaper.Keep, Log: slog.New(slog.DiscardHandler)}
	if n, err := sweep.Sweep(t.Context()); err != nil || n != 0 || !slices.Contains(warmObjects(t, e), second) {
		t.Errorf("the sweep deleted %d (%v)", n, err)
	}
	stop()
	if names := warmObjects(t, e); len(names) != 0 {
		t.Errorf("warm sandboxes after the stop: %v", names)
	}
	for _, sb := range []string{id, proj} {
		if r := e.do("GET", "/v1/sandbox/"+sb, "acme", nil); r.Status != 200 || r.JSON(t)["status"] != "running" {
			t.Errorf("the leased %s after the pool stopped: %d %s", sb, r.Status, r.Body)
		}
	}
}

// TestWarmPoolOnKube: a cluster cannot hand a started pod to a lease, so
// --warm-pool asked for by name is said to do nothing there (a warning at
// the start), and a lease starts its own pod as ever.
func TestWarmPoolOnKube(t *testing.T) {
	cfg := server.Config{Warm: warm.Config{Size: 2}}
	e, _, _ := newKubeEnvConfig(t, cfg)
	if !strings.Contains(e.logs.String(), "--warm-pool is not available on this backend") {
		t.Errorf("no warning of the pool the backend cannot keep; the log:\n%s", e.logs.String())
	}
	id := e.lease("acme", nil)
	if out := e.sh("acme", id, "echo ok"); out != "ok\n" {
		t.Errorf("a command in the lease: %q", out)
	}
	if !strings.Contains(e.logs.String(), "sandbox="+id) || strings.Contains(e.logs.String(), "warm=true") {
		t.Errorf("the lease was not its own pod's:\n%s", e.logs.String())
	}
}
