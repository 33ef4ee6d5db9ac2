package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests drive the build machinery (locking, stale cleanup, checks,
// manifest, atomic publication) with a fake bootstrap that lays out a tiny
// rootfs in microseconds. They chown to uid 1000, hence root.

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the rootfs belongs to uid 1000)")
	}
}

type fake struct {
	calls   atomic.Int32
	delay   time.Duration
	fail    error
	skipUsr bool // leave the user out, so the checks fail
	marker  string
}

func (f *fake) bootstrap(ctx context.Context, r Recipe, target string, w io.Writer) error {
	f.calls.Add(1)
	if err := os.MkdirAll(filepath.Join(target, "usr/bin"), 0o755); err != nil {
		return err
	}
	for _, d := range []string{"etc", "mnt/data", "work", "home/user", "var/lib/dpkg"} {
		if err := os.MkdirAll(filepath.Join(target, d), 0o755); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "I: fake bootstrap")
	for _, d := range []string{"mnt/data", "work", "home/user"} {
		if err := os.Chown(filepath.Join(target, d), 1000, 1000); err != nil {
			return err
		}
	}
	for _, c := range r.Commands {
		if err := os.WriteFile(filepath.Join(target, c), []byte("#!/bin/sh\n"), 0o755); err != nil {
			return err
		}
	}
	os.WriteFile(filepath.Join(target, "marker"), []byte(f.marker), 0o644)
	os.WriteFile(filepath.Join(target, "var/lib/dpkg/status"), []byte("Package: a\nStatus: install ok installed\n\nPackage: b\nStatus: install ok installed\n\n"), 0o644)
	passwd := "root:x:0:0:root:/root:/bin/bash\n"
	if !f.skipUsr {
		passwd += "user:x:1000:1000::/home/user:/bin/bash\n"
	}
	os.WriteFile(filepath.Join(target, "etc/passwd"), []byte(passwd), 0o644)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.fail
}

func (f *fake) builder() *builder {
	return &builder{bootstrap: f.bootstrap, version: func() string { return "fake 1" }}
}

func tinyRecipe() Recipe {
	r, _ := RecipeFor("exec")
	r.Packages = []string{"python3-minimal"}
	r.Commands = []string{"/usr/bin/python3"}
	return r
}

func marker(t *testing.T, dir, name string) string {
	t.Helper()
	p, err := rootfs(dir, name)
	if err != nil {
		t.Fatalf("rootfs: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(p, "marker"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// leftovers lists dot-entries of dir other than lock files.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && !strings.HasPrefix(e.Name(), lockPrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestBuildFakeLifecycle(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	r := tinyRecipe()
	f := &fake{marker: "one"}

	// Leftovers of a crashed build of this image go; another image's stay.
	for _, d := range []string{".build-exec-crashed", ".old-exec-crashed", ".build-dev-running"} {
		os.MkdirAll(filepath.Join(dir, d, "rootfs"), 0o755)
	}

	var out bytes.Buffer
	if err := f.builder().build(ctx, dir, r, &out); err != nil {
		t.Fatalf("build: %v\n%s", err, out.String())
	}
	for _, want := range []string{"[1/4]", "[2/4]", "[3/4]", "[4/4]", "I: fake bootstrap", "2 packages installed", "built in", "removing"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if got := leftovers(t, dir); len(got) != 1 || got[0] != ".build-dev-running" {
		t.Errorf("leftovers after build: %v", got)
	}
	m, err := Inspect(dir, "exec")
	if err != nil {
		t.Fatal(err)
	}
	if m.RecipeHash != r.Hash() || m.Installed != 2 || m.Builder != "fake 1" || m.SizeBytes <= 0 || m.Files == 0 ||
		len(m.Packages) != 1 || m.BuiltAt.IsZero() {
		t.Errorf("manifest: %+v", m)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "exec")); fi.Mode().Perm() != 0o755 {
		t.Errorf("image dir mode %v", fi.Mode().Perm())
	}
	if got := marker(t, dir, "exec"); got != "one" {
		t.Errorf("marker %q", got)
	}

	// Idempotent: no bootstrap, says so.
	out.Reset()
	if err := f.builder().build(ctx, dir, r, &out); err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 1 || !strings.Contains(out.String(), "already built") {
		t.Errorf("second build: %d bootstraps, output %q", f.calls.Load(), out.String())
	}

	// A failed rebuild of a changed recipe leaves the old image untouched.
	r2 := r
	r2.Packages = append(r2.Packages, "less")
	bad := &fake{marker: "bad", fail: errors.New("boom")}
	if err := bad.builder().build(ctx, dir, r2, io.Discard); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing build: %v", err)
	}
	if got := marker(t, dir, "exec"); got != "one" {
		t.Errorf("old image damaged: marker %q", got)
	}
	// So does one whose result fails the checks.
	nouser := &fake{marker: "nouser", skipUsr: true}
	if err := nouser.builder().build(ctx, dir, r2, io.Discard); err == nil || !strings.Contains(err.Error(), "uid 1000") {
		t.Fatalf("unchecked build: %v", err)
	}
	r3 := r2
	r3.Commands = append(r3.Commands, "/usr/bin/less")
	missing := &fake{marker: "missing"}
	missingRecipe := r3
	missingBoot := func(ctx context.Context, rr Recipe, target string, w io.Writer) error {
		return missing.bootstrap(ctx, r2, target, w) // installs r2's commands only
	}
	if err := (&builder{bootstrap: missingBoot, version: func() string { return "x" }}).build(ctx, dir, missingRecipe, io.Discard); err == nil || !strings.Contains(err.Error(), "/usr/bin/less") {
		t.Fatalf("build missing a command: %v", err)
	}
	if got := marker(t, dir, "exec"); got != "one" {
		t.Errorf("old image damaged: marker %q", got)
	}
	if got := leftovers(t, dir); len(got) != 1 {
		t.Errorf("failed builds left %v", got)
	}

	// A cancelled rebuild leaves the old image too.
	slow := &fake{marker: "slow", delay: time.Minute}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := slow.builder().build(cctx, dir, r2, io.Discard); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled build: %v", err)
	}
	if got := marker(t, dir, "exec"); got != "one" {
		t.Errorf("old image damaged: marker %q", got)
	}

	// A successful rebuild replaces it, and nothing is left aside.
	two := &fake{marker: "two"}
	out.Reset()
	if err := two.builder().build(ctx, dir, r2, &out); err != nil {
		t.Fatal(err)
	}
	if got := marker(t, dir, "exec"); got != "two" {
		t.Errorf("not replaced: marker %q", got)
	}
	if m, _ := Inspect(dir, "exec"); m.RecipeHash != r2.Hash() {
		t.Error("manifest not replaced")
	}
	if !strings.Contains(out.String(), "recipe changed") || !strings.Contains(out.String(), "replaced the previous image") {
		t.Errorf("output: %s", out.String())
	}
	if got := leftovers(t, dir); len(got) != 1 {
		t.Errorf("replacement left %v", got)
	}
}

func TestBuildFakeConcurrent(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	f := &fake{marker: "x", delay: 300 * time.Millisecond}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	outs := make([]bytes.Buffer, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.builder().build(context.Background(), dir, tinyRecipe(), &outs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("build %d: %v", i, err)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d bootstraps for 3 concurrent builds of one recipe", n)
	}
	waited := 0
	for i := range outs {
		if strings.Contains(outs[i].String(), "waiting for it to finish") {
			waited++
		}
	}
	if waited != 2 {
		t.Errorf("%d builds said they waited, want 2", waited)
	}
	if _, err := rootfs(dir, "exec"); err != nil {
		t.Error(err)
	}
}

func TestBuildFakeCancelledFresh(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	f := &fake{delay: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := f.builder().build(ctx, dir, tinyRecipe(), io.Discard); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if _, err := Rootfs(dir, "exec"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Rootfs after a cancelled build: %v", err)
	}
	if got := leftovers(t, dir); len(got) != 0 {
		t.Errorf("cancelled build left %v", got)
	}
}
