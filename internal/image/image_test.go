package image

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	got := Names()
	want := []string{"exec", "dev", "desktop", "android"}
	if !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	got[0] = "mutated"
	if Names()[0] != "exec" {
		t.Fatal("Names() shares its slice with callers")
	}
	for _, n := range want {
		if _, err := RecipeFor(n); err != nil {
			t.Errorf("RecipeFor(%q): %v", n, err)
		}
	}
}

func TestRecipeFor(t *testing.T) {
	execR, _ := RecipeFor("exec")
	devR, _ := RecipeFor("dev")
	deskR, _ := RecipeFor("desktop")
	andR, _ := RecipeFor("android")

	for _, r := range []Recipe{execR, devR, deskR, andR} {
		if r.Suite != "bookworm" || r.Variant != "minbase" || r.Arch == "" || len(r.Mirrors) == 0 {
			t.Errorf("%s: suite %q variant %q arch %q mirrors %v", r.Name, r.Suite, r.Variant, r.Arch, r.Mirrors)
		}
	}
	wantExec := []string{"ca-certificates", "coreutils", "python3", "procps", "nodejs", "node-typescript",
		"bash", "r-base-core", "php-cli", "golang-go", "rustc", "gcc", "g++", "libc6-dev",
		"default-jdk-headless", "gdc", "gfortran", "socat", "less", "file",
		"python3-pip", "python3-venv", "npm", "cargo", "curl", "git"} // an agent's package managers (issue 26)
	for _, p := range wantExec {
		for _, r := range []Recipe{execR, devR, deskR} {
			if !slices.Contains(r.Packages, p) {
				t.Errorf("%s lacks %s", r.Name, p)
			}
		}
	}
	for _, p := range []string{"tmux", "zsh", "make", "openssh-client", "vim-tiny"} {
		if slices.Contains(execR.Packages, p) {
			t.Errorf("exec has dev-only %s", p)
		}
		if !slices.Contains(devR.Packages, p) || !slices.Contains(deskR.Packages, p) {
			t.Errorf("dev/desktop lack %s", p)
		}
	}
	for _, p := range []string{"xvfb", "openbox", "xterm", "x11vnc"} {
		if slices.Contains(devR.Packages, p) || !slices.Contains(deskR.Packages, p) {
			t.Errorf("desktop-only %s misplaced", p)
		}
	}
	if !execR.Buildable || !devR.Buildable || !deskR.Buildable {
		t.Error("exec, dev and desktop must be buildable")
	}
	if andR.Buildable || !strings.Contains(andR.Missing, "/dev/kvm") || !strings.Contains(andR.Missing, "bookworm") {
		t.Errorf("android: Buildable=%v Missing=%q", andR.Buildable, andR.Missing)
	}
	// Every class needs the language toolchains checked after a build.
	for _, c := range []string{"/usr/bin/python3", "/usr/bin/node", "/usr/bin/tsc", "/usr/bin/go", "/usr/bin/rustc",
		"/usr/bin/javac", "/usr/bin/Rscript", "/usr/bin/php", "/usr/bin/gcc", "/usr/bin/g++", "/usr/bin/gdc", "/usr/bin/gfortran"} {
		if !slices.Contains(execR.Commands, c) || !slices.Contains(devR.Commands, c) {
			t.Errorf("exec/dev do not check %s", c)
		}
	}

	// A returned recipe is a copy.
	execR.Packages[0] = "mutated"
	again, _ := RecipeFor("exec")
	if again.Packages[0] == "mutated" {
		t.Error("RecipeFor shares its package slice")
	}

	_, err := RecipeFor("nope")
	if err == nil || !strings.Contains(err.Error(), "exec, dev, desktop, android") || errors.Is(err, ErrNotBuilt) {
		t.Errorf("RecipeFor(nope) = %v", err)
	}
}

func TestHash(t *testing.T) {
	a, _ := RecipeFor("exec")
	b, _ := RecipeFor("exec")
	if a.Hash() != b.Hash() || len(a.Hash()) != 64 {
		t.Fatalf("hash not stable: %s vs %s", a.Hash(), b.Hash())
	}
	hashes := map[string]string{}
	for _, n := range Names() {
		r, _ := RecipeFor(n)
		if other, dup := hashes[r.Hash()]; dup {
			t.Errorf("%s and %s hash alike", n, other)
		}
		hashes[r.Hash()] = n
	}

	// Order and duplicates of packages do not shape the result.
	c := a
	c.Packages = slices.Clone(a.Packages)
	slices.Reverse(c.Packages)
	c.Packages = append(c.Packages, c.Packages[0])
	if c.Hash() != a.Hash() {
		t.Error("package order/duplicates change the hash")
	}
	// Checks, buildability and explanations do not either.
	c = a
	c.Commands = []string{"/bin/true"}
	c.Missing = "x"
	if c.Hash() != a.Hash() {
		t.Error("Commands/Missing change the hash")
	}
	// Everything else does.
	for what, mut := range map[string]func(*Recipe){
		"package": func(r *Recipe) { r.Packages = append(slices.Clone(r.Packages), "htop") },
		"suite":   func(r *Recipe) { r.Suite = "trixie" },
		"variant": func(r *Recipe) { r.Variant = "apt" },
		"arch":    func(r *Recipe) { r.Arch = "arm64" },
		"mirror":  func(r *Recipe) { r.Mirrors = []string{"deb http://example.org/debian bookworm main"} },
		"name":    func(r *Recipe) { r.Name = "dev" },
	} {
		c := a
		mut(&c)
		if c.Hash() == a.Hash() {
			t.Errorf("changing the %s does not change the hash", what)
		}
	}
}

func TestBuildCommand(t *testing.T) {
	if got := BuildCommand(DefaultDir, "dev"); got != "sandbox image build dev" {
		t.Errorf("default dir: %q", got)
	}
	if got := BuildCommand(DefaultDir+"/", "dev"); got != "sandbox image build dev" {
		t.Errorf("default dir with slash: %q", got)
	}
	if got := BuildCommand("/srv/img", "exec"); got != "sandbox image build exec --images /srv/img" {
		t.Errorf("other dir: %q", got)
	}
	err := notBuilt(DefaultDir, "dev", "")
	if want := "image \"dev\" is not built: run `sandbox image build dev`"; err.Error() != want || !errors.Is(err, ErrNotBuilt) {
		t.Errorf("got %q, want %q", err, want)
	}
}

// fakeImage lays out dir/name as a build would leave it.
func fakeImage(t *testing.T, dir, name string, manifest bool, rootfs bool) {
	t.Helper()
	img := filepath.Join(dir, name)
	if err := os.MkdirAll(img, 0o755); err != nil {
		t.Fatal(err)
	}
	if rootfs {
		if err := os.MkdirAll(filepath.Join(img, "rootfs", "usr", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if manifest {
		b, _ := json.Marshal(Manifest{Name: name, RecipeHash: "abc", BuiltAt: time.Now()})
		if err := os.WriteFile(filepath.Join(img, "image.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRootfs(t *testing.T) {
	dir := t.TempDir()
	wantMsg := func(name string) string {
		return "image \"" + name + "\" is not built: run `sandbox image build " + name + " --images " + dir + "`"
	}
	notBuiltCase := func(name, label string) {
		t.Helper()
		p, err := Rootfs(dir, name)
		if !errors.Is(err, ErrNotBuilt) || p != "" {
			t.Fatalf("%s: Rootfs = %q, %v; want ErrNotBuilt", label, p, err)
		}
		if !strings.HasPrefix(err.Error(), wantMsg(name)) {
			t.Fatalf("%s: message %q does not start with %q", label, err, wantMsg(name))
		}
	}

	notBuiltCase("dev", "missing")
	if _, err := Rootfs(dir, "dev"); err.Error() != wantMsg("dev") {
		t.Errorf("missing: message %q, want exactly %q", err, wantMsg("dev"))
	}

	// Half-built: a rootfs and no manifest.
	fakeImage(t, dir, "dev", false, true)
	notBuiltCase("dev", "no manifest")

	// A manifest but no rootfs.
	fakeImage(t, dir, "exec", true, false)
	notBuiltCase("exec", "no rootfs")

	// A manifest naming another image.
	fakeImage(t, dir, "desktop", false, true)
	b, _ := json.Marshal(Manifest{Name: "exec", RecipeHash: "abc"})
	os.WriteFile(filepath.Join(dir, "desktop", "image.json"), b, 0o644)
	notBuiltCase("desktop", "foreign manifest")

	// An unreadable manifest.
	os.WriteFile(filepath.Join(dir, "desktop", "image.json"), []byte("{"), 0o644)
	notBuiltCase("desktop", "corrupt manifest")

	// A complete image inside a build directory is not the image.
	fakeImage(t, filepath.Join(dir, ".build-dev-123"), "", true, true)
	notBuiltCase("dev", "only a .build dir")

	// Complete.
	fakeImage(t, dir, "dev", true, true)
	p, err := Rootfs(dir, "dev")
	if err != nil || p != filepath.Join(dir, "dev", "rootfs") || !filepath.IsAbs(p) {
		t.Fatalf("complete: Rootfs = %q, %v", p, err)
	}

	// Unknown names are not "not built".
	for _, n := range []string{"nope", "", "../dev", ".build-dev-1"} {
		if _, err := Rootfs(dir, n); err == nil || errors.Is(err, ErrNotBuilt) {
			t.Errorf("Rootfs(%q) = %v, want an unknown-image error", n, err)
		}
	}

	// Android cannot be built here: the message says why instead of naming
	// a command that would fail.
	_, err = Rootfs(dir, "android")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "/dev/kvm") {
		t.Errorf("android: %v", err)
	}
	fakeImage(t, dir, "android", true, true) // provided by other means
	if _, err := Rootfs(dir, "android"); err != nil {
		t.Errorf("android provided: %v", err)
	}
}

func TestBuildRefusesAndroidAndUnknown(t *testing.T) {
	dir := t.TempDir()
	err := Build(context.Background(), dir, "android", nil)
	if err == nil || !strings.Contains(err.Error(), "cannot be built") || !strings.Contains(err.Error(), "/dev/kvm") {
		t.Errorf("android: %v", err)
	}
	if err := Build(context.Background(), dir, "nope", nil); err == nil || !strings.Contains(err.Error(), "unknown image") {
		t.Errorf("nope: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused builds left %d entries", len(entries))
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/lib/go-1.19/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "etc/alternatives"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/lib/go-1.19/bin/go"), nil, 0o755))
	must(os.Symlink("../lib/go-1.19/bin/go", filepath.Join(root, "usr/bin/go")))           // relative
	must(os.Symlink("/usr/lib/go-1.19/bin/go", filepath.Join(root, "etc/alternatives/x"))) // absolute: inside root
	must(os.Symlink("/etc/alternatives/x", filepath.Join(root, "usr/bin/x")))
	must(os.Symlink("../../../../../../etc/passwd", filepath.Join(root, "usr/bin/escape")))
	must(os.Symlink("loop", filepath.Join(root, "usr/bin/loop")))
	must(os.Symlink("/bin", filepath.Join(root, "usr/bin/hostbin")))

	want := filepath.Join(root, "usr/lib/go-1.19/bin/go")
	for _, p := range []string{"/usr/bin/go", "/usr/bin/x", "usr/bin/x"} {
		if got, err := resolveIn(root, p); err != nil || got != want {
			t.Errorf("resolveIn(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	if got, err := resolveIn(root, "/usr/bin/escape"); err == nil {
		t.Errorf("escape resolved to %q: must stay inside the root (and not exist there)", got)
	}
	if _, err := resolveIn(root, "/usr/bin/loop"); err == nil {
		t.Error("a symlink loop resolved")
	}
	if _, err := resolveIn(root, "/usr/bin/hostbin/sh"); err == nil {
		t.Error("/bin of the host was followed")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:           "/a/b",
		`/a\040b`:        "/a b",
		`/x\134y`:        `/x\y`,
		`/tail\04`:       `/tail\04`,
		`/mid\040\011z`:  "/mid \tz",
		`/not\0x9octal`:  `/not\0x9octal`,
		`/end\040`:       "/end ",
		`/multi\040\040`: "/multi  ",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 231_000_000: "231 MB", 2_100_000_000: "2.1 GB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
