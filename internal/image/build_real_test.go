package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cancelOn is a progress writer that cancels the build when a line
// containing trigger goes by.
type cancelOn struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	cancel  context.CancelFunc
	fired   bool
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if !c.fired && bytes.Contains(p, []byte(c.trigger)) {
		c.fired = true
		c.cancel()
	}
	return len(p), nil
}

// TestBuildTinyReal runs the real mmdebstrap on a tiny recipe (minbase +
// python3-minimal, ~15 s and ~200 MB each, three builds) under the name
// "exec" in a temp dir: cancellation, atomicity, manifest, idempotence and
// replacement, with the real hooks.
func TestBuildTinyReal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds real images with mmdebstrap (network, ~1 min)")
	}
	if os.Geteuid() != 0 {
		t.Skip("mmdebstrap --mode=root needs root")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("mmdebstrap is not installed")
	}
	dir := t.TempDir()
	r := tinyRecipe()
	b := &builder{}

	// 1. Cancelled while dpkg runs inside the chroot (/proc etc. mounted):
	// no image, no build dir, no mount left behind.
	ctx, cancel := context.WithCancel(context.Background())
	cw := &cancelOn{trigger: "I: installing remaining packages", cancel: cancel}
	err := b.build(ctx, dir, r, cw)
	cancel()
	if !cw.fired {
		t.Fatalf("the build never reached the trigger: %v\n%s", err, cw.buf.String())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled build returned %v\n%s", err, cw.buf.String())
	}
	if _, err := Rootfs(dir, "exec"); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Rootfs after a cancelled build: %v", err)
	}
	if got := leftovers(t, dir); len(got) != 0 {
		t.Fatalf("cancelled build left %v", got)
	}
	if m, _ := mountsUnder(dir); len(m) != 0 {
		t.Fatalf("mounts left under %s: %v", dir, m)
	}

	// 2. A real build.
	var out bytes.Buffer
	start := time.Now()
	if err := b.build(context.Background(), dir, r, &out); err != nil {
		t.Fatalf("build: %v\n%s", err, out.String())
	}
	t.Logf("tiny build: %s\n%s", time.Since(start).Round(time.Second), out.String())
	for _, want := range []string{"[1/4] downloading and unpacking bookworm minbase + 1 package (mmdebstrap)", "I: running apt-get update",
		"packages installed in", "[2/4]", "[3/4]", "[4/4]", "built in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	root, err := Rootfs(dir, "exec")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Inspect(dir, "exec")
	if err != nil || m.RecipeHash != r.Hash() || m.Installed < 50 || m.SizeBytes < 50e6 || !strings.HasPrefix(m.Builder, "mmdebstrap") {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	checkFile := func(p, want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %q, %v; want it to contain %q", p, b, err, want)
		}
	}
	checkFile("etc/passwd", "user:x:1000:1000::/home/user:/bin/bash")
	checkFile("etc/group", "user:x:1000:")
	checkFile("etc/hosts", "127.0.0.1\tlocalhost")
	checkFile("etc/hostname", "sandbox")
	if lists, _ := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_Packages")); len(lists) != 0 {
		t.Errorf("apt lists kept: %v", lists)
	}
	if debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb")); len(debs) != 0 {
		t.Errorf("downloaded .debs kept: %d", len(debs))
	}
	if err := verify(root, r); err != nil {
		t.Error(err)
	}
	// The image runs: python3 inside a chroot as uid 1000.
	cmd := exec.Command("chroot", "--userspec=1000:1000", root, "/usr/bin/python3", "-c", "import os; print(os.getuid(), os.getcwd())")
	if b, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(b), "1000 ") {
		t.Errorf("python3 in the image as 1000: %q, %v", b, err)
	}

	// 3. Idempotent: fast, says so, image untouched.
	out.Reset()
	start = time.Now()
	if err := b.build(context.Background(), dir, r, &out); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second || !strings.Contains(out.String(), "already built") {
		t.Errorf("second build took %s: %s", d, out.String())
	}
	if m2, _ := Inspect(dir, "exec"); !m2.BuiltAt.Equal(m.BuiltAt) {
		t.Error("second build replaced the image")
	}

	// 4. A changed recipe, cancelled: the old image stays, complete.
	r2 := r
	r2.Packages = append(r2.Packages, "less")
	r2.Commands = append(r2.Commands, "/usr/bin/less")
	ctx, cancel = context.WithCancel(context.Background())
	cw = &cancelOn{trigger: "I: downloading packages", cancel: cancel}
	err = b.build(ctx, dir, r2, cw)
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled rebuild returned %v\n%s", err, cw.buf.String())
	}
	if m2, err := Inspect(dir, "exec"); err != nil || m2.RecipeHash != r.Hash() {
		t.Fatalf("old image after a cancelled rebuild: %+v, %v", m2, err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Fatal(err)
	}

	// 5. The changed recipe, built: replaced atomically, nothing left aside.
	out.Reset()
	if err := b.build(context.Background(), dir, r2, &out); err != nil {
		t.Fatalf("rebuild: %v\n%s", err, out.String())
	}
	if m2, err := Inspect(dir, "exec"); err != nil || m2.RecipeHash != r2.Hash() {
		t.Fatalf("after rebuild: %+v, %v", m2, err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/less")); err != nil {
		t.Error(err)
	}
	if got := leftovers(t, dir); len(got) != 0 {
		t.Errorf("rebuild left %v", got)
	}
	if !strings.Contains(out.String(), "replaced the previous image") {
		t.Errorf("output: %s", out.String())
	}
}
