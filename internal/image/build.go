package image

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Build builds the image name under dir (usually DefaultDir), idempotently.
//
// If a complete image with the same recipe hash is in place it says so on w
// and returns nil at once. Otherwise it removes what a crashed build of that
// name left behind, builds into dir/.build-NAME-RANDOM, checks the result,
// writes the manifest, and renames the build into dir/NAME; a previous image
// is renamed aside first and removed after. Until that rename the previous
// image (if any) stays in place and usable; a failed or cancelled build
// leaves nothing. Builds of the same name exclude each other through a lock
// file (dir/.lock-NAME); the second waits.
//
// Progress goes to w: numbered steps, mmdebstrap's own lines, the elapsed
// time of each step and the final size. Build needs root and mmdebstrap.
func Build(ctx context.Context, dir, name string, w io.Writer) error {
	r, err := RecipeFor(name)
	if err != nil {
		return err
	}
	if !r.Buildable {
		return fmt.Errorf("image %q cannot be built by this tool: %s", name, r.Missing)
	}
	return (&builder{}).build(ctx, dir, r, w)
}

// builder holds the seams the tests use. The zero value runs mmdebstrap.
type builder struct {
	// bootstrap creates the rootfs at target (which does not exist yet),
	// writing progress lines to w.
	bootstrap func(ctx context.Context, r Recipe, target string, w io.Writer) error
	// version names the tool that built the image, for the manifest.
	version func() string
}

const (
	buildPrefix = ".build-"
	oldPrefix   = ".old-"
	lockPrefix  = ".lock-"
	indent      = "      "
)

func (b *builder) build(ctx context.Context, dir string, r Recipe, w io.Writer) (err error) {
	if w == nil {
		w = io.Discard
	}
	if b.bootstrap == nil {
		b.bootstrap = mmdebstrap
	}
	if b.version == nil {
		b.version = mmdebstrapVersion
	}
	hash := r.Hash()
	start := time.Now()

	if ok := reportUpToDate(dir, r.Name, hash, w); ok {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("image %q: %w", r.Name, err)
	}
	unlock, err := lockImage(ctx, dir, r.Name, w)
	if err != nil {
		return err
	}
	defer unlock()
	// Another build may have finished while this one waited for the lock.
	if ok := reportUpToDate(dir, r.Name, hash, w); ok {
		return nil
	}
	if err := removeStale(dir, r.Name, w); err != nil {
		return err
	}

	prev, prevErr := Inspect(dir, r.Name)
	switch {
	case prevErr == nil:
		fmt.Fprintf(w, "image %q: recipe changed (built %s, now %s); rebuilding, the current image stays in place until the new one is complete\n",
			r.Name, short(prev.RecipeHash), short(hash))
	default:
		fmt.Fprintf(w, "image %q: building recipe %s (%s/%s %s, %s) in %s\n",
			r.Name, short(hash), r.Suite, r.Variant, r.Arch, plural(len(r.uniquePackages()), "package"), dir)
	}

	tmp, err := os.MkdirTemp(dir, buildPrefix+r.Name+"-")
	if err != nil {
		return fmt.Errorf("image %q: %w", r.Name, err)
	}
	// MkdirTemp makes it 0700; apt's download user (_apt) and, once
	// published, the runtime must be able to traverse it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image %q: %w", r.Name, err)
	}
	published := false
	defer func() {
		if published {
			return
		}
		if rerr := safeRemoveAll(tmp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the unfinished build %s: %w", tmp, rerr))
		}
	}()
	target := filepath.Join(tmp, rootfsDir)

	// 1. bootstrap
	t := time.Now()
	fmt.Fprintf(w, "[1/4] downloading and unpacking %s %s + %s (mmdebstrap)...\n",
		r.Suite, r.Variant, plural(len(r.uniquePackages()), "package"))
	if err := b.bootstrap(ctx, r, target, w); err != nil {
		return fmt.Errorf("image %q: %w", r.Name, err)
	}
	installed, _ := countInstalled(target)
	fmt.Fprintf(w, "%s%d packages installed in %s\n", indent, installed, since(t))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("image %q: build cancelled: %w", r.Name, err)
	}

	// 2. check
	t = time.Now()
	fmt.Fprintf(w, "[2/4] checking the rootfs (user %d, /mnt/data, /work, %s)...\n", UserUID, plural(len(r.Commands), "command"))
	if err := verify(target, r); err != nil {
		return fmt.Errorf("image %q: the built rootfs is unusable: %w", r.Name, err)
	}
	fmt.Fprintf(w, "%sok in %s\n", indent, since(t))

	// 3. measure, manifest
	t = time.Now()
	fmt.Fprintf(w, "[3/4] measuring and writing %s...\n", manifestFile)
	size, files, err := diskUsage(target)
	if err != nil {
		return fmt.Errorf("image %q: measuring: %w", r.Name, err)
	}
	m := Manifest{
		Name: r.Name, RecipeHash: hash, Suite: r.Suite, Variant: r.Variant, Arch: r.Arch,
		Packages: r.uniquePackages(), Installed: installed,
		BuiltAt: time.Now().UTC().Truncate(time.Second), BuildSeconds: time.Since(start).Round(100 * time.Millisecond).Seconds(),
		SizeBytes: size, Files: files, Builder: b.version(),
	}
	if err := writeManifest(tmp, m); err != nil {
		return fmt.Errorf("image %q: %w", r.Name, err)
	}
	fmt.Fprintf(w, "%s%s in %d files, %s\n", indent, humanBytes(size), files, since(t))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("image %q: build cancelled: %w", r.Name, err)
	}

	// 4. publish
	t = time.Now()
	final := filepath.Join(dir, r.Name)
	fmt.Fprintf(w, "[4/4] installing into %s...\n", final)
	old, err := publish(dir, tmp, final, r.Name)
	if err != nil {
		return fmt.Errorf("image %q: %w", r.Name, err)
	}
	published = true
	if old != "" {
		if err := safeRemoveAll(old); err != nil {
			// The new image is in place; only disk space is at stake, and the
			// next build removes what is left.
			fmt.Fprintf(w, "%swarning: removing the previous image %s: %v\n", indent, old, err)
		} else {
			fmt.Fprintf(w, "%sreplaced the previous image\n", indent)
		}
	}
	fmt.Fprintf(w, "%sdone in %s\n", indent, since(t))
	fmt.Fprintf(w, "image %q built in %s: %s at %s\n", r.Name, since(start), humanBytes(size), filepath.Join(final, rootfsDir))
	return nil
}

// reportUpToDate says whether a complete image with this hash is in place,
// and tells w so.
func reportUpToDate(dir, name, hash string, w io.Writer) bool {
	m, err := Inspect(dir, name)
	if err != nil || m.RecipeHash != hash {
		return false
	}
	fmt.Fprintf(w, "image %q is already built (recipe %s, built %s, %s): %s\n",
		name, short(hash), m.BuiltAt.Format(time.RFC3339), humanBytes(m.SizeBytes), filepath.Join(dir, name, rootfsDir))
	return true
}

// publish moves the finished build tmp to final. An existing final is first
// renamed aside into a fresh dir/.old-NAME-RANDOM directory, which is
// returned for the caller to remove; if the second rename fails the previous
// image is put back.
func publish(dir, tmp, final, name string) (old string, err error) {
	var aside string
	if _, err := os.Lstat(final); err == nil {
		old, err = os.MkdirTemp(dir, oldPrefix+name+"-")
		if err != nil {
			return "", err
		}
		aside = filepath.Join(old, name)
		if err := os.Rename(final, aside); err != nil {
			os.Remove(old)
			return "", fmt.Errorf("moving the previous image aside: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		if aside != "" {
			if rerr := os.Rename(aside, final); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restoring the previous image from %s: %w", aside, rerr))
			}
		}
		return "", fmt.Errorf("installing the new image: %w", err)
	}
	syncDir(dir)
	return old, nil
}

// lockImage takes dir/.lock-NAME exclusively, waiting (and saying so) while
// another build holds it. The lock dies with the process.
func lockImage(ctx context.Context, dir, name string, w io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockPrefix+name), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("image %q: lock: %w", name, err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("image %q: lock: %w", name, err)
		}
		if !said {
			fmt.Fprintf(w, "image %q: another build of it is running; waiting for it to finish...\n", name)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("image %q: waiting for the other build: %w", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// removeStale removes what a crashed build of name left: .build-NAME-* and
// .old-NAME-* directories. The caller holds the lock of name, so none of them
// belongs to a running build.
func removeStale(dir, name string, w io.Writer) error {
	for _, prefix := range []string{buildPrefix, oldPrefix} {
		matches, err := filepath.Glob(filepath.Join(dir, prefix+name+"-*"))
		if err != nil {
			return err
		}
		for _, p := range matches {
			fmt.Fprintf(w, "image %q: removing %s left by an interrupted build\n", name, p)
			if err := safeRemoveAll(p); err != nil {
				return fmt.Errorf("image %q: removing stale %s: %w", name, p, err)
			}
		}
	}
	return nil
}

// safeRemoveAll removes p, but never through a mount point: a chroot with
// /proc, /sys or /dev still mounted inside would otherwise take the host's
// files with it. mmdebstrap runs in a private mount namespace so this should
// never find anything; if it does, it detaches the mounts and refuses when
// that fails.
func safeRemoveAll(p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	mounts, err := mountsUnder(abs)
	if err != nil {
		return fmt.Errorf("not removing %s: cannot read the mount table: %w", abs, err)
	}
	for i := len(mounts) - 1; i >= 0; i-- { // deepest last in the table → first here
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	if len(mounts) > 0 {
		if left, err := mountsUnder(abs); err != nil || len(left) > 0 {
			return fmt.Errorf("not removing %s: still mounted inside: %v", abs, left)
		}
	}
	return os.RemoveAll(abs)
}

// mountsUnder lists the mount points at or below dir, in mount-table order.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// mmdebstrap runs the real bootstrap. Root mode (we are root) inside a
// private mount namespace, in its own process group so that cancelling kills
// apt and dpkg too.
func mmdebstrap(ctx context.Context, r Recipe, target string, w io.Writer) error {
	bin, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return fmt.Errorf("mmdebstrap is not installed (apt-get install mmdebstrap): %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("building images needs root (mmdebstrap --mode=root)")
	}
	args := []string{
		"--mode=root",
		"--variant=" + r.Variant,
		"--format=directory",
		"--architectures=" + r.Arch,
		`--aptopt=Acquire::Retries "3"`,
	}
	if pkgs := r.uniquePackages(); len(pkgs) > 0 {
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	for _, x := range r.Exclude {
		args = append(args, "--dpkgopt=path-exclude="+x)
	}
	for _, h := range append(slices.Clone(customizeHooks), r.Trim...) {
		args = append(args, "--customize-hook="+h)
	}
	args = append(args, r.Suite, target)
	args = append(args, r.Mirrors...)

	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = nil // /dev/null: mmdebstrap never waits for sources on stdin
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Env = buildEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Unshareflags: syscall.CLONE_NEWNS, // Go also makes / MS_REC|MS_PRIVATE
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("starting mmdebstrap: %w", err)
	}
	pw.Close()

	tail := newTail(15)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			if line == "" {
				continue
			}
			tail.add(line)
			fmt.Fprintf(w, "%s%s\n", indent, line)
		}
	}()
	werr := cmd.Wait()
	if werr != nil {
		// Whatever of the group is left (apt, dpkg, a maintainer script):
		// gone now, and with it the last holder of the mount namespace.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a straggler keeps the pipe open
		pr.Close()
		<-done
	}
	if werr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("build cancelled: %w", ctx.Err())
		}
		return fmt.Errorf("mmdebstrap failed (%v); its last lines:\n%s", werr, tail.String())
	}
	return nil
}

func buildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C.UTF-8", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
}

func mmdebstrapVersion() string {
	out, err := exec.Command("mmdebstrap", "--version").Output()
	if err != nil {
		return "mmdebstrap"
	}
	return strings.TrimSpace(string(out))
}

// verify checks what the runtime and the classes rely on.
func verify(root string, r Recipe) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Errorf("rootfs mode %v is not world-readable", fi.Mode().Perm())
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		return err
	}
	want := fmt.Sprintf("%s:x:%d:%d:", UserName, UserUID, UserGID)
	found := false
	for _, line := range strings.Split(string(passwd), "\n") {
		if strings.HasPrefix(line, want) {
			f := strings.Split(line, ":")
			if len(f) == 7 && f[5] == UserHome && f[6] == "/bin/bash" {
				found = true
			}
		}
	}
	if !found {
		return fmt.Errorf("no user %s with uid %d, home %s and shell /bin/bash in /etc/passwd", UserName, UserUID, UserHome)
	}
	for _, d := range []string{"/mnt/data", "/work", UserHome} {
		fi, err := os.Stat(filepath.Join(root, d))
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !ok || st.Uid != UserUID || st.Gid != UserGID {
			return fmt.Errorf("%s is not a directory owned by %d:%d", d, UserUID, UserGID)
		}
	}
	var missing []string
	for _, c := range r.Commands {
		p, err := resolveIn(root, c)
		if err != nil {
			missing = append(missing, c)
			continue
		}
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o001 == 0 {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing commands: %s", strings.Join(missing, " "))
	}
	return nil
}

// resolveIn maps the path p inside the tree root to a host path, following
// symlinks as a process chrooted into root would (absolute targets restart
// at root, ".." stops at root).
func resolveIn(root, p string) (string, error) {
	parts := strings.Split(p, "/")
	cur := "/"
	links := 0
	for len(parts) > 0 {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		host := filepath.Join(root, next)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return filepath.Join(root, cur), nil
}

// countInstalled counts the packages dpkg has installed in root.
func countInstalled(root string) (int, error) {
	b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte("\nStatus: install ok installed\n")), nil
}

// diskUsage is du: allocated bytes of the tree (hard links counted once) and
// the number of entries.
func diskUsage(root string) (size, files int64, err error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			size += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		size += st.Blocks * 512
		return nil
	})
	return size, files, err
}

// writeManifest writes dir/image.json durably.
func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, manifestFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	syncDir(dir)
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func since(t time.Time) string {
	d := time.Since(t)
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// tail keeps the last n lines of a stream for an error message.
type tail struct {
	n     int
	lines []string
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

func (t *tail) String() string { return indent + strings.Join(t.lines, "\n"+indent) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
