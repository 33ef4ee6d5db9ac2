package integration_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/store"
)

// restart replaces e's server with a new one on the same data directory,
// as a process restart would.
func (e *env) restart(t *testing.T) {
	t.Helper()
	// The same address: it is the issuer's URL, which the lease
	// credentials handed before the restart name.
	addr := e.http.Listener.Addr().String()
	e.http.Close()
	e.srv.Close()
	srv, err := server.New(t.Context(), e.cfg, slog.New(slog.NewTextHandler(e.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler)
	ts.Listener.Close()
	ts.Listener = ln
	ts.Start()
	e.srv, e.http = srv, ts
}

// orphan starts a container that carries the sandbox label but that no row
// claims, the way a crash between start and record would leave one.
func orphan(t *testing.T, e *env) runtime.Object {
	t.Helper()
	vol := "scratch-orphan-" + sandbox.NewName()
	obj, err := e.srv.Runtime.Create(t.Context(), runtime.Spec{
		Name: sandbox.NewName(), Labels: map[string]string{runtime.LabelSandbox: sandbox.NewID()}, Image: "exec",
		Workdir: "/mnt/data", Volume: runtime.Volume{Name: vol, Scratch: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func names(t *testing.T, e *env) map[string]bool {
	objs, err := e.srv.Runtime.List(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, o := range objs {
		m[o.Name] = true
	}
	return m
}

func TestOrphanSweep(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", nil)
	o := orphan(t, e)
	e.srv.Reaper.Grace = time.Hour
	if n, err := e.srv.Reaper.Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("a fresh object was swept (grace): %d %v", n, err)
	}

	// An org whose store cannot be read: the sweep deletes nothing at all.
	broken := sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: "broken", Subject: "t"})
	dbPath := filepath.Join(e.data, "orgs", sandbox.Slug("broken"), "sandbox.db")
	os.MkdirAll(dbPath, 0o700) // a directory where the file should be
	if _, err := e.srv.Store.List(broken, store.Filter{}); err == nil {
		t.Fatal("the broken store opened")
	}
	e.srv.Reaper.Grace = time.Nanosecond
	if n, err := e.srv.Reaper.Sweep(t.Context()); err == nil || n != 0 {
		t.Fatalf("sweep with an unreadable store: deleted %d, err %v", n, err)
	}
	if !names(t, e)[o.Name] {
		t.Fatal("the orphan was deleted although a store was unreadable")
	}

	os.RemoveAll(dbPath)
	if n, err := e.srv.Reaper.Sweep(t.Context()); err != nil || n != 1 {
		t.Fatalf("sweep: deleted %d, err %v", n, err)
	}
	left := names(t, e)
	if left[o.Name] || len(left) != 1 {
		t.Errorf("after the sweep: %v", left)
	}
	e.sh("acme", id, "true") // the claimed sandbox is untouched
}

// TestRecoverAfterRestart: a restart adopts running containers, completes a
// lease interrupted between start and record, and puts a row whose
// container vanished to sleep (files kept, woken fresh on use).
func TestRecoverAfterRestart(t *testing.T) {
	e := newEnv(t)
	alive := e.lease("acme", nil)
	lost := e.lease("acme", map[string]any{"project": "keep"})
	e.sh("acme", lost, "echo safe > f.txt")

	// A lease interrupted after its container started: row pending, no uid.
	ctx := sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: "acme", Subject: "t"})
	now := time.Now().UTC()
	half := &sandbox.Sandbox{ID: sandbox.NewID(), Class: "exec", Status: sandbox.StatusPending, Image: "exec", Runtime: "gvisor",
		Workdir: "/mnt/data", Name: sandbox.NewName(), CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(time.Hour)}
	half.Volume = "scratch-" + half.ID
	if err := e.srv.Store.Insert(ctx, half, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Runtime.Create(ctx, runtime.Spec{Name: half.Name, Labels: map[string]string{runtime.LabelSandbox: half.ID},
		Image: "exec", Workdir: "/mnt/data", Volume: runtime.Volume{Name: half.Volume, Scratch: true}}); err != nil {
		t.Fatal(err)
	}
	// A lease interrupted before its container started.
	never := *half
	never.ID, never.Name = sandbox.NewID(), sandbox.NewName()
	never.Volume = "scratch-" + never.ID
	if err := e.srv.Store.Insert(ctx, &never, nil); err != nil {
		t.Fatal(err)
	}
	// The container of one sandbox vanishes while the server is down.
	var lostName string
	for _, o := range mustList(t, e) {
		if o.Labels[runtime.LabelSandbox] == lost {
			lostName = o.Name
		}
	}
	e.restart(t)
	killContainer(t, e, lostName)
	e.restart(t)

	status := func(id string) string {
		var sb map[string]any
		json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).Body, &sb)
		return sb["status"].(string)
	}
	if s := status(alive); s != "running" {
		t.Errorf("alive: %s", s)
	}
	if s := status(half.ID); s != "running" {
		t.Errorf("interrupted after start: %s", s)
	}
	if s := status(never.ID); s != "error" {
		t.Errorf("interrupted before start: %s", s)
	}
	if s := status(lost); s != "sleeping" {
		t.Errorf("lost container: %s", s)
	}
	e.sh("acme", alive, "true")
	e.sh("acme", half.ID, "true")
	if got := e.sh("acme", lost, "cat f.txt"); got != "safe\n" {
		t.Errorf("lost sandbox woken: %q", got)
	}
	// One sweep and one reap leave exactly the claimed containers.
	e.srv.Reaper.Grace = time.Nanosecond
	e.srv.Reaper.Sweep(t.Context())
	e.srv.Reaper.Once(t.Context())
	e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+never.ID, "acme", nil)
	if n := len(mustList(t, e)); n != 3 {
		t.Errorf("%d containers after recovery, want 3", n)
	}
}

func mustList(t *testing.T, e *env) []runtime.Object {
	objs, err := e.srv.Runtime.List(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestLiveGaugeAfterRestart: the live gauge a restart starts from adds up
// every org's sandboxes (it once kept only the last org's count).
func TestLiveGaugeAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.lease("acme", nil)
	e.lease("globex", nil)
	e.restart(t)
	m := string(e.must(http.StatusOK, "GET", "/metrics", "system", nil).Body)
	if !strings.Contains(m, `sandbox_live{class="exec"} 2`) {
		t.Errorf("after a restart with one exec sandbox in each of two orgs:\n%s", m)
	}
}

// TestRestartResumesAForkInterrupted: a server that died in the instant a
// fork held the original paused (runsc pause, checkpoint half written)
// leaves it running again at its next start, and the crashed fork's
// checkpoint is gone.
func TestRestartResumesAForkInterrupted(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnv(t)
	id := e.lease("acme", nil)
	e.sh("acme", id, "echo kept > f")
	objs, err := e.srv.Runtime.List(t.Context(), nil)
	if err != nil || len(objs) != 1 {
		t.Fatalf("containers: %v %v", objs, err)
	}
	raw, err := os.ReadFile(filepath.Join(e.data, "runtime", "bundles", objs[0].Name, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Flags []string }
	json.Unmarshal(raw, &m)
	out, err := exec.Command(gvisor.DefaultRunsc(), append(m.Flags, "pause", objs[0].Name)...).CombinedOutput()
	if err != nil {
		t.Fatalf("runsc pause: %v %s", err, out)
	}
	stale := filepath.Join(e.data, "runtime", "checkpoints", "fork-sbx-crashed")
	os.MkdirAll(stale, 0o700)
	os.WriteFile(filepath.Join(stale, "pages.img"), []byte("half"), 0o600)
	e.restart(t)
	if got := e.sh("acme", id, "cat f"); got != "kept\n" {
		t.Errorf("after the restart: %q", got)
	}
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "running" {
		t.Errorf("the paused sandbox after a restart: %v", sb)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the crashed fork's checkpoint is still there: %v", err)
	}
}
