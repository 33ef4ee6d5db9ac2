// Package gvisor is the embedded runtime backend: it drives a pinned runsc
// binary with OCI bundles on local disk. It is the only package of the
// service that starts processes.
//
// Each sandbox is one runsc container with no network (its own loopback
// and nothing else: --network=sandbox over a namespace whose one link is
// its loopback, so that runsc's port forward reaches it; network.go), or
// with the network its policy opens (internal/egress); a read-only shared
// image under an in-memory writable overlay, one bind-mounted host
// directory as its workdir, uid 1000 inside and cgroup limits from its
// class. Every call on a container repeats the
// global flags it was created with (runsc reads them on each invocation), so
// those flags are rebuilt from the bundle's meta file rather than from the
// server's current configuration.
package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/flagx"
	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
)

// PinnedRunsc is where scripts/deps.sh installs the runsc build this backend
// is tested with. Debian's own runsc package is too old for current kernels.
const PinnedRunsc = "/usr/local/libexec/sandbox/runsc-20260905035102-160fafc42237"

// DefaultRunsc is the runsc to use when none is named: $SANDBOX_RUNSC, else
// the pinned build.
func DefaultRunsc() string {
	if p := os.Getenv("SANDBOX_RUNSC"); p != "" {
		return p
	}
	return PinnedRunsc
}

// Options are the operator's settings of the backend (flags).
type Options struct {
	// Runsc is the runsc binary. Required: Debian's runsc package is too old
	// to work on current kernels, so the caller passes the pinned build.
	Runsc string
	// Platform is runsc's platform; empty means systrap.
	Platform string
	// CPUWeight is the weight of all sandboxes together against the host's
	// other work, the control plane's included (100 is a peer's); zero
	// means DefaultCPUWeight. See cgroup.go.
	CPUWeight int
	// MaxStarts bounds the sandbox starts (a lease's or a wake's `runsc
	// run` or create and restore) under way at once; more wait their turn.
	// Zero means DefaultMaxStarts, negative no bound (the flag's 0).
	MaxStarts int64
	// SystrapFastPath lets systrap spin a free core for a sandbox's
	// syscalls (runsc's fast path, which it turns on by its own measure);
	// false passes --systrap-disable-fast-path. Sandboxes share this
	// machine's cores: a burst of 100 leases on two cores took 15–20% less
	// CPU and wall without it, and the sequential first command was no
	// slower (BENCHMARKS.md).
	SystrapFastPath bool
	// Egress is where sandboxes with a network policy reach the world.
	Egress egress.Options
}

// DefaultMaxStarts is twice the cores: a hundred leases at once on two
// cores finished in 16 s with four starts at a time, 18–19 s with eight,
// and 22–26 s with all of them at once (BENCHMARKS.md), each start's
// processes and sentry contending with all the others'.
var DefaultMaxStarts = int64(2 * goruntime.NumCPU())

// startsFlag is --max-starts: "auto" (the zero value: DefaultMaxStarts,
// which depends on the machine), a number, or 0 for no bound (stored as
// flagx.Off).
type startsFlag int64

func (v *startsFlag) String() string {
	switch {
	case v == nil || *v == 0:
		return "auto"
	case *v < 0:
		return "0"
	}
	return strconv.FormatInt(int64(*v), 10)
}

func (v *startsFlag) Set(s string) error {
	if s == "auto" {
		*v = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n < 0:
		return fmt.Errorf("not auto or a whole number: %q", s)
	case n == 0:
		n = flagx.Off
	}
	*v = startsFlag(n)
	return nil
}

// maxStarts is o's bound, 0 for none.
func (o Options) maxStarts() int {
	switch {
	case o.MaxStarts == 0:
		return int(DefaultMaxStarts)
	case o.MaxStarts < 0:
		return 0
	}
	return int(o.MaxStarts)
}

// DefaultCPUWeight gives the control plane ten times the sandboxes' claim
// on a busy host's CPU; sandboxes still take every core nothing else wants.
const DefaultCPUWeight = 10

// RegisterFlags defines the backend's flags on fs, writing into o.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Runsc, "runsc", DefaultRunsc(), "gvisor: the runsc binary (env SANDBOX_RUNSC)")
	fs.StringVar(&o.Platform, "platform", "systrap", "gvisor: runsc's platform, systrap or ptrace (kvm hangs on nested VMs)")
	fs.IntVar(&o.CPUWeight, "sandbox-cpu-weight", DefaultCPUWeight, "gvisor: the CPU weight (1-10000, a peer's is 100) of all sandboxes together against this server and the host's other work when the CPU is contended")
	fs.Var((*startsFlag)(&o.MaxStarts), "max-starts", "gvisor: sandbox starts (a lease's or a wake's) under way at once, the rest waiting their turn within --start-timeout: a burst finishes sooner than with all at once; auto (the default) is twice the cores, 0 no bound")
	fs.BoolVar(&o.SystrapFastPath, "systrap-fast-path", false, "gvisor: let systrap spin a free core for a sandbox's syscalls (runsc's fast path); off, sandboxes sharing the cores spend less CPU: a burst of 100 leases on two cores took 15-20% less")
	o.Egress.RegisterFlags(fs)
}

// Validate checks that the options can run sandboxes here.
func (o Options) Validate() error {
	if o.Platform != "" && !slices.Contains(Platforms, o.Platform) {
		return fmt.Errorf("--platform must be one of %s, not %q", strings.Join(Platforms, ", "), o.Platform)
	}
	if o.CPUWeight < 0 || o.CPUWeight > 10000 {
		return fmt.Errorf("--sandbox-cpu-weight must be 1-10000, not %d", o.CPUWeight)
	}
	if st, err := os.Stat(o.Runsc); o.Runsc == "" || err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("runsc not found at %q: run scripts/deps.sh, or pass --runsc", o.Runsc)
	}
	return o.Egress.Validate()
}

// Config configures the backend. Zero values are documented per field.
type Config struct {
	Options
	// StateDir holds runsc's root, the bundles and the volumes. Required.
	StateDir string
	// ImageRootfs maps an image name to its complete rootfs directory, or an
	// error saying it is not built. Required.
	ImageRootfs func(name string) (string, error)
	// UID and GID the sandboxed programs run as; zero means 1000.
	UID, GID int
	// ImageEnv is the environment an image asks for (its config's Env),
	// given to every program of a sandbox on it; nil means none.
	ImageEnv func(image string) []string
	// Runner is the host path of cmd/sandbox-runner, bind-mounted read-only
	// at runtime.RunnerPath in every sandbox; empty mounts nothing.
	Runner string
	// Network says sandboxes may get a network policy: the egress side
	// (see internal/egress) is made ready at New, so a host that cannot
	// enforce policies fails at start, not at a lease. Without it, egress
	// starts only to adopt sandboxes an earlier server gave one.
	Network bool
	// NetworkOpen are the private ranges the operator opened to policies.
	NetworkOpen []netip.Prefix
	// Log receives the egress side's notes; nil discards them.
	Log *slog.Logger
}

// Runtime is the gvisor backend.
type Runtime struct {
	cfg     Config
	root    string // runsc --root
	bundles string
	volumes string
	checks  string // checkpoints
	loops   string // the loopback namespaces of sandboxes with no network

	starts chan struct{} // a start's turn (Options.MaxStarts); nil: no bound

	mu   sync.Mutex
	meta map[string]*meta // cached bundle metadata by name

	links    sync.Map // name → the server's end of its init's relay socket, until taken (TakeInitLink)
	forwards sync.Map // name → its *forwarder (ForwardPort)
	loaded   sync.Map // name → its running *container.Container (container)

	netMu sync.Mutex
	net   *egress.Manager // nil until a sandbox needs it (or cfg.Network)

	// channel: commands go over the control socket in this process
	// (channel.go), the runsc binary being the build linked here; else
	// through `runsc exec`.
	channel bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// meta is written into the bundle directory before runsc is called, so a
// crash at any point leaves enough on disk to find and delete the container.
type meta struct {
	Name      string            `json:"name"`
	UID       string            `json:"uid"`
	Labels    map[string]string `json:"labels"`
	Created   time.Time         `json:"created"`
	Flags     []string          `json:"flags"` // global runsc flags of this container
	Volume    runtime.Volume    `json:"volume"`
	Workdir   string            `json:"workdir"`
	Pids      int64             `json:"pids"`
	FileBytes int64             `json:"fileBytes"`
	Env       []string          `json:"env,omitempty"`  // the image's
	User      *runtime.User     `json:"user,omitempty"` // the image's, else the backend's
	Net       *netMeta          `json:"net,omitempty"`  // nil: no network
	// Loop: no network, but a namespace of its own with its loopback up
	// (network.go), so runsc's port forward reaches it. A sandbox of an
	// earlier server has none (--network=none): its previews go through
	// the relay.
	Loop bool `json:"loop,omitempty"`
}

// netMeta is a sandbox's network as the egress side needs it to adopt it
// after a restart.
type netMeta struct {
	Key    string            `json:"key"`
	Index  int               `json:"index"` // 0 until attached
	Policy *netpolicy.Policy `json:"policy,omitempty"`
}

// New checks the configuration and prepares the state directories.
func New(cfg Config) (*Runtime, error) {
	if cfg.Runsc == "" || cfg.StateDir == "" || cfg.ImageRootfs == nil {
		return nil, errors.New("gvisor: Runsc, StateDir and ImageRootfs are required")
	}
	if _, err := exec.LookPath(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("gvisor: runsc binary: %w", err)
	}
	if cfg.Platform == "" {
		cfg.Platform = "systrap"
	}
	if cfg.UID == 0 {
		cfg.UID, cfg.GID = 1000, 1000
	}
	if cfg.CPUWeight == 0 {
		cfg.CPUWeight = DefaultCPUWeight
	}
	if err := prepareCgroups(cfg.CPUWeight); err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg:     cfg,
		root:    filepath.Join(cfg.StateDir, "runsc"),
		bundles: filepath.Join(cfg.StateDir, "bundles"),
		volumes: filepath.Join(cfg.StateDir, "volumes"),
		checks:  filepath.Join(cfg.StateDir, "checkpoints"),
		loops:   filepath.Join(cfg.StateDir, "loopns"),
		meta:    map[string]*meta{},
	}
	if n := cfg.maxStarts(); n > 0 {
		r.starts = make(chan struct{}, n)
	}
	var why string
	if r.channel, why = sameBuild(cfg.Runsc); !r.channel && cfg.Log != nil {
		cfg.Log.Info("gvisor: commands go through `runsc exec` processes, not the in-process channel", "why", why)
	}
	if r.channel && cfg.Log != nil {
		logRunscTo(cfg.Log)
	}
	for _, d := range []string{r.root, r.bundles, r.volumes, r.checks, r.loops} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	// The volumes directory is traversed by the gofer on behalf of uid 1000.
	if err := os.Chmod(r.volumes, 0o711); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	return r, nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{3,62}$`)

func (r *Runtime) globalFlags(rootfsMiB int64, network bool) []string {
	overlay := "root:memory"
	if rootfsMiB > 0 {
		overlay += ",size=" + strconv.FormatInt(rootfsMiB, 10) + "M"
	}
	// --network=sandbox: gVisor's own network stack on the namespace's
	// interface (the egress side's veth), never the host's.
	mode := "--network=none"
	if network {
		mode = "--network=sandbox"
	}
	flags := []string{"--root", r.root, mode, "--overlay2=" + overlay, "--platform=" + r.cfg.Platform}
	if r.cfg.Platform == "systrap" && !r.cfg.SystrapFastPath {
		flags = append(flags, "--systrap-disable-fast-path")
	}
	return flags
}

// runscTimeout bounds one runsc call whose caller set no deadline: a hung
// runsc must not hold an end or the reaper forever.
const runscTimeout = 2 * time.Minute

// runsc runs one runsc command to completion and returns its stdout.
func (r *Runtime) runsc(ctx context.Context, flags []string, args ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, runscTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, append(append([]string{}, flags...), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(lastLines(errb.String(), 5)))
	}
	return out.Bytes(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func newUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Create writes the bundle, then creates and starts the container. On any
// failure it tears down what it made and reports every failure.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Object, error) {
	bundle, rootfs, m, err := r.newBundle(spec)
	if err != nil {
		return runtime.Object{}, err
	}
	release, err := r.startTurn(ctx)
	if err != nil {
		cleanup := r.teardown(context.WithoutCancel(ctx), m)
		return runtime.Object{}, errors.Join(err, cleanup)
	}
	obj, err := r.create(ctx, bundle, rootfs, m, spec)
	release()
	if err != nil {
		cleanup := r.teardown(context.WithoutCancel(ctx), m)
		return runtime.Object{}, errors.Join(err, cleanup)
	}
	return obj, nil
}

// startTurn waits for a start's turn (Options.MaxStarts), or ctx's end;
// release gives it back.
func (r *Runtime) startTurn(ctx context.Context) (release func(), err error) {
	if r.starts == nil {
		return func() {}, nil
	}
	select {
	case r.starts <- struct{}{}:
		return func() { <-r.starts }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("gvisor: waiting for a start's turn: %w", ctx.Err())
	}
}

// hasShell refuses a rootfs without /bin/sh: every door runs programs
// through it, and init (the runner, mounted from the host) would start
// even in an empty rootfs, making a sandbox that answers every command
// with an error. The lookup is confined to the rootfs (os.Root), so an
// absolute symlink cannot find the host's shell.
func hasShell(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("gvisor: image rootfs: %w", err)
	}
	defer root.Close()
	st, err := root.Stat("bin/sh")
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("gvisor: the image has no /bin/sh (%v)", err)
	}
	return nil
}

// newBundle checks spec and makes its bundle directory and metadata.
func (r *Runtime) newBundle(spec runtime.Spec) (bundle, rootfs string, m *meta, err error) {
	if !namePattern.MatchString(spec.Name) {
		return "", "", nil, fmt.Errorf("gvisor: invalid name %q", spec.Name)
	}
	if spec.Labels[runtime.LabelSandbox] == "" {
		return "", "", nil, errors.New("gvisor: spec lacks the sandbox label")
	}
	if rootfs, err = r.cfg.ImageRootfs(spec.Image); err != nil {
		return "", "", nil, err
	}
	// runsc cannot start on a rootfs reached through a symlink (an
	// operator's images directory may well be one).
	if rootfs, err = filepath.EvalSymlinks(rootfs); err != nil {
		return "", "", nil, fmt.Errorf("gvisor: image rootfs: %w", err)
	}
	if err := hasShell(rootfs); err != nil {
		return "", "", nil, err
	}
	bundle = filepath.Join(r.bundles, spec.Name)
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return "", "", nil, fmt.Errorf("gvisor: bundle: %w", err) // names are never reused
	}
	m = &meta{
		Name: spec.Name, UID: newUID(), Labels: spec.Labels, Created: time.Now().UTC(),
		Volume: spec.Volume, Workdir: spec.Workdir,
		Pids: spec.Pids, FileBytes: spec.FileMiB << 20, User: spec.User,
		// The port forward is a call of the control channel: without it
		// the namespace would buy nothing.
		Loop: spec.Network == nil && r.channel,
	}
	m.Flags = r.globalFlags(spec.RootfsMiB, spec.Network != nil || m.Loop)
	if spec.Network != nil {
		m.Net = &netMeta{Key: egress.KeyOf(spec.Name), Policy: spec.Network.Policy()}
	}
	if r.cfg.ImageEnv != nil {
		m.Env = r.cfg.ImageEnv(spec.Image)
	}
	return bundle, rootfs, m, nil
}

func (r *Runtime) create(ctx context.Context, bundle, rootfs string, m *meta, spec runtime.Spec) (runtime.Object, error) {
	if err := r.prepare(ctx, bundle, rootfs, m, spec); err != nil {
		return runtime.Object{}, err
	}
	if spec.Restore == "" {
		if err := r.step(ctx, bundle, m, "run", "--detach", "--bundle", bundle, m.Name); err != nil {
			return runtime.Object{}, err
		}
		return m.object(), nil
	}
	dir, err := r.checkpointPath(spec.Restore)
	if err != nil {
		return runtime.Object{}, err
	}
	if err := r.step(ctx, bundle, m, "create", "--bundle", bundle, m.Name); err != nil {
		return runtime.Object{}, err
	}
	if err := r.step(ctx, bundle, m, "restore", "--detach", "--image-path", dir, "--bundle", bundle, m.Name); err != nil {
		return runtime.Object{}, err
	}
	return m.object(), nil
}

func (m *meta) object() runtime.Object {
	return runtime.Object{Name: m.Name, UID: m.UID, Labels: m.Labels, Created: m.Created, Running: true}
}

// prepare writes the bundle (metadata first, so a crash from here on
// leaves what finds the container) and readies its volume.
func (r *Runtime) prepare(ctx context.Context, bundle, rootfs string, m *meta, spec runtime.Spec) error {
	if err := writeJSON(filepath.Join(bundle, "meta.json"), m); err != nil {
		return err
	}
	hostDir, err := r.ensureVolume(ctx, spec.Volume)
	if err != nil {
		return err
	}
	if err := r.attach(bundle, m, spec.Network); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(bundle, "config.json"), r.ociSpec(rootfs, hostDir, m, spec)); err != nil {
		return err
	}
	r.mu.Lock()
	r.meta[m.Name] = m
	r.mu.Unlock()
	return nil
}

// step runs one runsc command of a container's start (run, or create then
// restore). Its stdout and stderr go to files, never pipes: the sandbox
// inherits them and a pipe it holds would hang Wait forever. stdout and
// stderr are separate files. Its stdin, which becomes init's, is a socket
// (initSocket) for the sandbox-making commands.
func (r *Runtime) step(ctx context.Context, bundle string, m *meta, args ...string) error {
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(bundle, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	stdout, err := open("runsc.out")
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := open("runsc.err")
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, append(append([]string{}, m.Flags...), args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	var link net.Conn
	if args[0] == "run" || args[0] == "create" {
		ours, theirs, err := initSocket()
		if err != nil {
			return err
		}
		defer theirs.Close() // the sandbox holds its own
		cmd.Stdin = theirs
		// A fresh start's init serves the relay on it when it is the
		// runner. A restored init's relay, if it had one, was the old
		// server end's: this socket only stands where the checkpoint's
		// stood (see initSocket), its other end closed at once.
		if args[0] == "run" && r.cfg.Runner != "" {
			link = ours
		} else {
			ours.Close()
		}
	}
	if err := cmd.Run(); err != nil {
		if link != nil {
			link.Close()
		}
		msg, _ := os.ReadFile(stderr.Name())
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLines(string(msg), 5))
	}
	if link != nil {
		r.links.Store(m.Name, link)
	}
	return nil
}

// initSocket is a connected pair of Unix sockets: ours, and theirs to
// give a sandbox as its init's stdin. The runner's init serves the relay
// on it from its start (cmd/sandbox-runner: initRelay), so no process
// starts for a sandbox's relay, nor for its lease's credential. A restore
// is given one too, always: gVisor saves a socket stdin (an epollable
// host file) to be given one again, and a restore handed /dev/null where
// a socket was would fail in the sentry.
func initSocket() (ours net.Conn, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: init's socket: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "init-relay")
	ours, err = net.FileConn(f)
	f.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("gvisor: init's socket: %w", err)
	}
	return ours, os.NewFile(uintptr(fds[1]), "init-relay"), nil
}

// TakeInitLink hands over the server's end of the relay that name's init
// serves (initSocket), once: a sandbox restored, or started by another
// server process, has none. The caller closes it.
func (r *Runtime) TakeInitLink(name string) (net.Conn, bool) {
	c, ok := r.links.LoadAndDelete(name)
	if !ok {
		return nil, false
	}
	return c.(net.Conn), true
}

// dropInitLink closes name's init link if nobody took it.
func (r *Runtime) dropInitLink(name string) {
	if c, ok := r.TakeInitLink(name); ok {
		c.Close()
	}
}

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (r *Runtime) checkpointPath(key string) (string, error) {
	if !keyPattern.MatchString(key) {
		return "", fmt.Errorf("gvisor: invalid checkpoint key %q", key)
	}
	return filepath.Join(r.checks, key), nil
}

// Checkpoint saves the container's memory (processes, the in-memory rootfs
// overlay, /tmp) with `runsc checkpoint`, which also stops it, and then
// removes the container and its bundle. The volume stays where it is.
func (r *Runtime) Checkpoint(ctx context.Context, ref runtime.Ref, key string) error {
	m, err := r.loadMeta(ref.Name)
	if err != nil {
		return err
	}
	if m.UID != ref.UID {
		return runtime.ErrConflict
	}
	dir, err := r.checkpointPath(key)
	if err != nil {
		return err
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	if _, err := r.runsc(ctx, m.Flags, "checkpoint", "--image-path", dir, m.Name); err != nil {
		os.RemoveAll(dir)
		return err
	}
	return r.teardown(ctx, m)
}

// Fork creates the container spec names from the memory of the running
// container ref at this instant. The new container is created (`runsc
// create`) while ref's memory is saved (`runsc checkpoint
// --leave-running`), then restored from it. A project volume is copied
// while ref is paused: the checkpoint flushes what the sandbox holds of
// its files to the volume first, so memory and files are of one instant.
// ref runs on afterwards, whatever happened.
func (r *Runtime) Fork(ctx context.Context, ref runtime.Ref, spec runtime.Spec) (runtime.Object, error) {
	src, err := r.loadMeta(ref.Name)
	if err != nil {
		return runtime.Object{}, err
	}
	if src.UID != ref.UID {
		return runtime.Object{}, runtime.ErrConflict
	}
	if src.Volume.Scratch != spec.Volume.Scratch {
		return runtime.Object{}, errors.New("gvisor: a fork's volume is of its original's kind")
	}
	var srcDir, dstDir string
	if !spec.Volume.Scratch {
		if srcDir, err = r.volumePath(src.Volume.Name); err != nil {
			return runtime.Object{}, err
		}
		if dstDir, err = r.volumePath(spec.Volume.Name); err != nil {
			return runtime.Object{}, err
		}
		if _, err := os.Stat(dstDir + ".img"); err == nil {
			return runtime.Object{}, fmt.Errorf("gvisor: fork: volume %s exists", spec.Volume.Name)
		}
	}
	dir, err := r.checkpointPath(forkPrefix + spec.Name)
	if err != nil {
		return runtime.Object{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return runtime.Object{}, fmt.Errorf("gvisor: %w", err)
	}
	defer os.RemoveAll(dir)
	bundle, rootfs, m, err := r.newBundle(spec)
	if err != nil {
		return runtime.Object{}, err
	}
	snap := make(chan error, 1)
	go func() { snap <- r.snapshot(ctx, src, dir, srcDir, dstDir) }()
	if dstDir != "" {
		// The copy must exist before the new container mounts it.
		err = <-snap
		snap = nil
	}
	if err == nil {
		if err = r.prepare(ctx, bundle, rootfs, m, spec); err == nil {
			err = r.step(ctx, bundle, m, "create", "--bundle", bundle, m.Name)
		}
	}
	if snap != nil {
		err = errors.Join(err, <-snap)
	}
	if err == nil {
		err = r.step(ctx, bundle, m, "restore", "--detach", "--image-path", dir, "--bundle", bundle, m.Name)
	}
	if err != nil {
		cleanup := r.teardown(context.WithoutCancel(ctx), m)
		if dstDir != "" && cleanup == nil {
			cleanup = r.DeleteVolume(context.WithoutCancel(ctx), spec.Volume.Name)
		}
		return runtime.Object{}, errors.Join(err, cleanup)
	}
	obj := m.object()
	obj.MemoryKept = true // restored from the original's checkpoint
	return obj, nil
}

// forkPrefix names the checkpoints of forks in flight; one found at a
// start is a crashed fork's.
const forkPrefix = "fork-"

// snapshot saves src's memory into dir and, with srcDir, copies its volume
// to dstDir's image while src is paused (a scratch workdir lives in
// memory: the checkpoint has it, and the checkpoint alone stops the world
// for as long as it needs).
func (r *Runtime) snapshot(ctx context.Context, src *meta, dir, srcDir, dstDir string) (err error) {
	if srcDir == "" {
		_, err := r.runsc(ctx, src.Flags, "checkpoint", "--leave-running", "--image-path", dir, src.Name)
		return err
	}
	if _, err := r.runsc(ctx, src.Flags, "pause", src.Name); err != nil {
		return err
	}
	defer func() {
		if _, rerr := r.runsc(context.WithoutCancel(ctx), src.Flags, "resume", src.Name); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if _, err := r.runsc(ctx, src.Flags, "checkpoint", "--leave-running", "--image-path", dir, src.Name); err != nil {
		return err
	}
	// The volume's ext4 is mounted here: flushed, it is what a crash at
	// this instant would leave, which a mount of the copy recovers.
	f, err := os.Open(srcDir)
	if err != nil {
		return fmt.Errorf("gvisor: fork: %w", err)
	}
	err = unix.Syncfs(int(f.Fd()))
	f.Close()
	if err != nil {
		return fmt.Errorf("gvisor: fork: syncfs: %w", err)
	}
	if err := os.MkdirAll(dstDir, 0o700); err != nil {
		return fmt.Errorf("gvisor: fork: %w", err)
	}
	// cp keeps the image sparse: a 10 GiB volume holding 5 MiB copies 5 MiB.
	if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", srcDir+".img", dstDir+".img").CombinedOutput(); err != nil {
		os.Remove(dstDir + ".img")
		return fmt.Errorf("gvisor: fork: copying the volume: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RootfsChanges is `runsc tar rootfs-upper`: the in-memory overlay's
// upper layer, with whiteouts for what was deleted.
func (r *Runtime) RootfsChanges(ctx context.Context, name string, w io.Writer) error {
	m, err := r.loadMeta(name)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(r.bundles, name), "upper-*.tar")
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := r.runsc(ctx, m.Flags, "tar", "rootfs-upper", "--file", tmp.Name(), m.Name); err != nil {
		return err
	}
	if _, err := io.Copy(w, tmp); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	return nil
}

// DropCheckpoint deletes a saved checkpoint.
func (r *Runtime) DropCheckpoint(ctx context.Context, key string) error {
	dir, err := r.checkpointPath(key)
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func (r *Runtime) volumePath(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return "", fmt.Errorf("gvisor: invalid volume name %q", name)
	}
	return filepath.Join(r.volumes, name), nil
}

// ensureVolume makes a project volume ready and returns its host path; a
// scratch volume has none (see workdirMount).
//
// A project volume is an ext4 filesystem in a sparse file, loop-mounted
// while a sandbox uses it: a bind-mounted plain directory would let one
// tenant fill the host's disk, and with it every org's database. The file
// is created (and formatted, in ~10 ms) on the project's first lease.
func (r *Runtime) ensureVolume(ctx context.Context, v runtime.Volume) (string, error) {
	if v.Scratch {
		return "", nil
	}
	dir, err := r.volumePath(v.Name)
	if err != nil {
		return "", err
	}
	img := dir + ".img"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("gvisor: volume: %w", err)
	}
	if mounted(dir) {
		return dir, nil
	}
	fresh := false
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		size := v.SizeMiB
		if size <= 0 {
			size = 10 << 10
		}
		if err := r.mkfs(ctx, img, size); err != nil {
			os.Remove(img)
			return "", err
		}
		fresh = true
	}
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop,nosuid,nodev", img, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("gvisor: mounting volume %s: %w: %s", v.Name, err, strings.TrimSpace(string(out)))
	}
	if fresh {
		os.Remove(filepath.Join(dir, "lost+found"))
	}
	return dir, nil
}

func (r *Runtime) mkfs(ctx context.Context, img string, sizeMiB int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("gvisor: volume: %w", err)
	}
	err = f.Truncate(sizeMiB << 20)
	f.Close()
	if err != nil {
		return fmt.Errorf("gvisor: volume: %w", err)
	}
	owner := fmt.Sprintf("root_owner=%d:%d", r.cfg.UID, r.cfg.GID)
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", owner, img).CombinedOutput(); err != nil {
		return fmt.Errorf("gvisor: mkfs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mounted reports whether dir is a mount point (its device differs from
// its parent's).
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// releaseVolume unmounts a project volume once no container uses it.
func (r *Runtime) releaseVolume(v runtime.Volume) error {
	if v.Scratch {
		return nil
	}
	dir, err := r.volumePath(v.Name)
	if err != nil {
		return err
	}
	if !mounted(dir) {
		return nil
	}
	if err := unix.Unmount(dir, 0); err != nil {
		return fmt.Errorf("gvisor: unmounting volume %s: %w", v.Name, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// baseEnv is the environment of every program in a sandbox. It carries no
// value from the server's own environment.
// user is who m's programs run as.
func (r *Runtime) user(m *meta) map[string]int {
	if m.User != nil {
		return map[string]int{"uid": m.User.UID, "gid": m.User.GID}
	}
	return map[string]int{"uid": r.cfg.UID, "gid": r.cfg.GID}
}

// env is the environment of m's programs: the base, then its image's,
// then more, a later value of a name replacing an earlier one.
func (r *Runtime) env(m *meta, more ...string) []string {
	return runtime.MergeEnv(runtime.MergeEnv(r.baseEnv(), m.Env...), more...)
}

func (r *Runtime) baseEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/home/user", "USER=user", "LOGNAME=user", "LANG=C.UTF-8", "HOSTNAME=sandbox",
	}
}

func (r *Runtime) rlimits(m *meta) []rlimit {
	rl := []rlimit{{Type: "RLIMIT_NOFILE", Hard: 65536, Soft: 65536}}
	if m.Pids > 0 {
		rl = append(rl, rlimit{Type: "RLIMIT_NPROC", Hard: uint64(m.Pids), Soft: uint64(m.Pids)})
	}
	if m.FileBytes > 0 {
		rl = append(rl, rlimit{Type: "RLIMIT_FSIZE", Hard: uint64(m.FileBytes), Soft: uint64(m.FileBytes)})
	}
	return rl
}

type rlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type process struct {
	Terminal        bool                `json:"terminal,omitempty"`
	ConsoleSize     *consoleSize        `json:"consoleSize,omitempty"`
	User            map[string]int      `json:"user"`
	Args            []string            `json:"args"`
	Env             []string            `json:"env"`
	Cwd             string              `json:"cwd"`
	NoNewPrivileges bool                `json:"noNewPrivileges"`
	Rlimits         []rlimit            `json:"rlimits"`
	Capabilities    map[string][]string `json:"capabilities"`
}

type consoleSize struct {
	Height uint `json:"height"`
	Width  uint `json:"width"`
}

func (r *Runtime) process(m *meta, args, env []string, cwd string) process {
	return process{
		User:            r.user(m),
		Args:            args,
		Env:             env,
		Cwd:             cwd,
		NoNewPrivileges: true,
		Rlimits:         r.rlimits(m),
		// No capabilities at all: the code inside is hostile.
		Capabilities: map[string][]string{"bounding": {}, "effective": {}, "inheritable": {}, "permitted": {}, "ambient": {}},
	}
}

// credentialMount is /run/sandbox, where the lease credential and the API
// socket go (credential.Path): the sandbox user's own directory (0700)
// from the start, in the sandbox's memory and bounded, so that neither
// the credential's writer nor the relay's listen needs root to make it.
func (r *Runtime) credentialMount(m *meta) map[string]any {
	u := r.user(m)
	return map[string]any{"destination": "/run/sandbox", "type": "tmpfs", "source": "tmpfs",
		"options": []string{"nosuid", "nodev", "noexec", "mode=0700", "size=1m",
			"uid=" + strconv.Itoa(u["uid"]), "gid=" + strconv.Itoa(u["gid"])}}
}

// workdirMount is the class workdir: the project volume bind-mounted from
// the host, or, for scratch, a tmpfs inside the sandbox bounded by the
// volume size (its pages count against the sandbox's memory, never against
// the host's disk, and a checkpoint keeps them).
func workdirMount(spec runtime.Spec, hostDir string) map[string]any {
	if spec.Volume.Scratch {
		size := spec.Volume.SizeMiB
		if size <= 0 {
			size = 512
		}
		return map[string]any{"destination": spec.Workdir, "type": "tmpfs", "source": "tmpfs",
			"options": []string{"nosuid", "nodev", "mode=0777", "size=" + strconv.FormatInt(size, 10) + "m"}}
	}
	return map[string]any{"destination": spec.Workdir, "type": "bind", "source": hostDir, "options": []string{"rbind", "rw", "nosuid", "nodev"}}
}

func (r *Runtime) ociSpec(rootfs, hostDir string, m *meta, spec runtime.Spec) map[string]any {
	tmpSize := "size=256m"
	if spec.RootfsMiB > 0 {
		tmpSize = "size=" + strconv.FormatInt(spec.RootfsMiB, 10) + "m"
	}
	annotations := map[string]string{"sandbox.dev/uid": m.UID}
	for k, v := range m.Labels {
		annotations[k] = v
	}
	resources := map[string]any{
		// Sentry threads count against pids.max, so it is generous; the
		// per-user process bound inside is RLIMIT_NPROC.
		"pids": map[string]any{"limit": 16384},
	}
	if spec.MemoryMiB > 0 {
		resources["memory"] = map[string]any{"limit": spec.MemoryMiB << 20}
	}
	if spec.CPUs > 0 {
		resources["cpu"] = map[string]any{"period": 100000, "quota": int64(spec.CPUs * 100000)}
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process":    r.process(m, r.initArgs(), r.env(m), spec.Workdir),
		// The image is shared by every sandbox of its class; writes land in
		// the per-sandbox in-memory overlay (--overlay2=root:memory).
		"root":     map[string]any{"path": rootfs, "readonly": false},
		"hostname": "sandbox",
		"mounts": append([]map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777", tmpSize}},
			workdirMount(spec, hostDir),
			r.credentialMount(m),
		}, append(r.runnerMount(), r.resolvMount(m)...)...),
		"linux": map[string]any{
			"namespaces": []map[string]string{
				{"type": "pid"}, r.netNamespace(m), {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
			},
			"cgroupsPath": "/" + cgroupParent + "/" + m.Name,
			"resources":   resources,
		},
		"annotations": annotations,
	}
}

// Backend is r as the service sees it: a runtime.Runner too when the
// runner is mounted into its sandboxes (Config.Runner).
func (r *Runtime) Backend() runtime.Backend {
	if r.cfg.Runner == "" {
		return r
	}
	return withRunner{r}
}

// withRunner is the backend whose sandboxes carry the runner.
type withRunner struct{ *Runtime }

// RunnerPath is where the runner is mounted.
func (withRunner) RunnerPath() string { return runtime.RunnerPath }

// runnerMount is the read-only bind of the interpreter's runner, if any.
func (r *Runtime) runnerMount() []map[string]any {
	if r.cfg.Runner == "" {
		return nil
	}
	return []map[string]any{{"destination": runtime.RunnerPath, "type": "bind", "source": r.cfg.Runner,
		"options": []string{"bind", "ro", "nosuid", "nodev"}}}
}

// initScript is PID 1 of a sandbox. A plain `sleep` would never reap the
// orphans that commands leave behind, and zombies would pile up until the
// process limit refuses every fork; bash reaps any child it is sent a
// SIGCHLD for. It also outlives its own sleeper: a stop's kill(-1), which
// spares PID 1, only makes the loop start another one.
const initScript = `trap '' TERM INT HUP; while :; do sleep 86400 & wait; done`

// initArgs is PID 1's command: the runner's init where there is a runner
// (it also keeps the background processes, see cmd/sandbox-runner), else
// initScript.
func (r *Runtime) initArgs() []string {
	if r.cfg.Runner != "" {
		return []string{runtime.RunnerPath, "init"}
	}
	return []string{"/bin/bash", "-c", initScript}
}

// loadMeta returns the bundle metadata of name, from cache or disk.
func (r *Runtime) loadMeta(name string) (*meta, error) {
	r.mu.Lock()
	m := r.meta[name]
	r.mu.Unlock()
	if m != nil {
		return m, nil
	}
	if !namePattern.MatchString(name) {
		return nil, runtime.ErrNotFound
	}
	b, err := os.ReadFile(filepath.Join(r.bundles, name, "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, runtime.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	m = new(meta)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("gvisor: meta of %s: %w", name, err)
	}
	r.mu.Lock()
	r.meta[name] = m
	r.mu.Unlock()
	if r.tornDown(name) { // read before its teardown, which has forgotten it
		r.mu.Lock()
		if r.meta[name] == m {
			delete(r.meta, name)
		}
		r.mu.Unlock()
		return nil, runtime.ErrNotFound
	}
	return m, nil
}

// Delete kills and removes the container named by ref if its identity is
// ref.UID, then its bundle and, for scratch, its volume.
func (r *Runtime) Delete(ctx context.Context, ref runtime.Ref) error {
	m, err := r.loadMeta(ref.Name)
	if err != nil {
		return err
	}
	if m.UID != ref.UID {
		return runtime.ErrConflict
	}
	return r.teardown(ctx, m)
}

// teardown removes the container, then its bundle. When runsc cannot
// delete the container the bundle (the only record of it) is kept, so a
// later Delete or sweep can try again.
func (r *Runtime) teardown(ctx context.Context, m *meta) error {
	if r.channel {
		if err := r.deleteChannel(m.Name); err != nil {
			return err
		}
	} else if _, err := r.runsc(ctx, m.Flags, "delete", "--force", m.Name); err != nil && !strings.Contains(err.Error(), "does not exist") && !strings.Contains(err.Error(), "not found") {
		return err
	}
	if err := removeCgroup(m.Name); err != nil {
		return err
	}
	if err := r.releaseVolume(m.Volume); err != nil {
		return err
	}
	if err := r.detach(m); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(r.bundles, m.Name)); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	r.mu.Lock()
	delete(r.meta, m.Name)
	r.mu.Unlock()
	r.forwards.Delete(m.Name)
	r.loaded.Delete(m.Name)
	r.dropInitLink(m.Name)
	return nil
}

// DeleteVolume drops a volume: unmounted, its directory and its file gone.
func (r *Runtime) DeleteVolume(ctx context.Context, name string) error {
	p, err := r.volumePath(name)
	if err != nil {
		return err
	}
	if err := r.releaseVolume(runtime.Volume{Name: name}); err != nil {
		return err
	}
	return errors.Join(os.RemoveAll(p), os.RemoveAll(p+".img"))
}

type runscState struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

// running reports whether a container runs: runsc's state file says so AND
// its sandbox process exists. The state file alone keeps saying "running"
// after the host killed the sandbox (for memory, say).
func (s runscState) running() bool {
	if s.Status != "running" {
		return false
	}
	if s.Pid <= 0 {
		return true
	}
	return unix.Kill(s.Pid, 0) != unix.ESRCH
}

// List returns the objects whose labels include selector. A bundle whose
// container runsc no longer knows is reported as not running, so a sweep can
// clear it.
func (r *Runtime) List(ctx context.Context, selector map[string]string) ([]runtime.Object, error) {
	entries, err := os.ReadDir(r.bundles)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	var metas []*meta
	for _, e := range entries {
		m, err := r.loadMeta(e.Name())
		if err != nil {
			continue // a bundle without meta was never started
		}
		if matches(m.Labels, selector) {
			metas = append(metas, m)
		}
	}
	var running func(string) bool
	if r.channel {
		names := make([]string, len(metas))
		for i, m := range metas {
			names[i] = m.Name
		}
		asked := r.runningAll(names)
		running = func(name string) bool { return asked[name] }
	} else {
		out, err := r.runsc(ctx, []string{"--root", r.root}, "list", "--format=json")
		if err != nil {
			return nil, err
		}
		var states []runscState
		if len(bytes.TrimSpace(out)) > 0 && !bytes.Equal(bytes.TrimSpace(out), []byte("null")) {
			if err := json.Unmarshal(out, &states); err != nil {
				return nil, fmt.Errorf("gvisor: runsc list: %w", err)
			}
		}
		listed := map[string]bool{}
		for _, s := range states {
			listed[s.ID] = s.running()
		}
		running = func(name string) bool { return listed[name] }
	}
	objs := make([]runtime.Object, 0, len(metas))
	for _, m := range metas {
		objs = append(objs, runtime.Object{Name: m.Name, UID: m.UID, Labels: m.Labels, Created: m.Created, Running: running(m.Name)})
	}
	return objs, nil
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || (v != "" && got != v) {
			return false
		}
	}
	return true
}

// Status reads one container's state from runsc, and asks the sandbox
// itself whether it still answers: in this process with the pinned runsc
// (runningChannel), else with `runsc state` and `runsc ps`.
func (r *Runtime) Status(ctx context.Context, name string) (runtime.Object, error) {
	m, err := r.loadMeta(name)
	if err != nil {
		return runtime.Object{}, err
	}
	obj := runtime.Object{Name: m.Name, UID: m.UID, Labels: m.Labels, Created: m.Created}
	if r.channel {
		obj.Running = r.runningChannel(name, true)
		return obj, nil
	}
	out, err := r.runsc(ctx, m.Flags, "state", name)
	if err != nil {
		return obj, nil // the bundle exists, the container does not run
	}
	var s runscState
	if err := json.Unmarshal(out, &s); err != nil {
		return obj, fmt.Errorf("gvisor: runsc state: %w", err)
	}
	obj.Running = s.running()
	if obj.Running {
		// A sandbox the host killed in part (its memory cgroup's OOM
		// killer) can keep a process and a "running" state file while its
		// control server is gone; asking that server is the real test.
		if _, err := r.runsc(ctx, m.Flags, "ps", "--format=json", name); err != nil {
			obj.Running = false
		}
	}
	return obj, nil
}

// Settle waits until no runsc command of this backend's root is still
// running, e.g. the `runsc run` of a lease whose server was killed: a
// container half-way through its start must not be judged (and deleted)
// while that orphaned command can still finish it. Long-lived sandbox and
// gofer processes do not count.
func (r *Runtime) Settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		busy, err := r.runscCommands()
		if err != nil {
			return err
		}
		if busy == 0 {
			stale, _ := filepath.Glob(filepath.Join(r.checks, forkPrefix+"*"))
			for _, d := range stale {
				os.RemoveAll(d)
			}
			if err := r.adoptNetworks(); err != nil {
				return err
			}
			return r.resumePaused(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gvisor: %d runsc commands still running: %w", busy, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// transient are the runsc subcommands that end on their own.
var transient = map[string]bool{"run": true, "create": true, "start": true, "delete": true, "kill": true,
	"checkpoint": true, "restore": true, "state": true, "list": true, "pause": true, "resume": true}

// resumePaused resumes every container left paused: only a fork pauses
// one, for an instant, and a server that died in that instant must not
// leave the sandbox frozen (or judged dead).
func (r *Runtime) resumePaused(ctx context.Context) error {
	out, err := r.runsc(ctx, []string{"--root", r.root}, "list", "--format=json")
	if err != nil {
		return err
	}
	var states []runscState
	if b := bytes.TrimSpace(out); len(b) > 0 && !bytes.Equal(b, []byte("null")) {
		if err := json.Unmarshal(b, &states); err != nil {
			return fmt.Errorf("gvisor: runsc list: %w", err)
		}
	}
	var errs []error
	for _, st := range states {
		if st.Status != "paused" {
			continue
		}
		m, err := r.loadMeta(st.ID)
		if err != nil {
			continue // not ours to judge; the sweep decides
		}
		if _, err := r.runsc(ctx, m.Flags, "resume", m.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runscCommands counts the processes running a transient runsc subcommand
// with this backend's --root.
func (r *Runtime) runscCommands() (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if args[0] != r.cfg.Runsc {
			continue
		}
		ours, sub := false, ""
		for i := 1; i < len(args); i++ {
			if args[i] == "--root" && i+1 < len(args) && args[i+1] == r.root {
				ours = true
				i++
				continue
			}
			if !strings.HasPrefix(args[i], "-") && sub == "" {
				sub = args[i]
			}
		}
		if ours && transient[sub] {
			n++
		}
	}
	return n, nil
}

// Stats reads runsc's own counters of the sandbox (what `runsc events
// --stats` prints): the sentry's CPU time, its application memory and its
// processes. With the pinned runsc they are asked over the control
// channel in this process (statsChannel), with no runsc process start.
func (r *Runtime) Stats(ctx context.Context, name string) (runtime.Stats, error) {
	m, err := r.loadMeta(name)
	if err != nil {
		return runtime.Stats{}, err
	}
	if r.channel {
		return r.statsChannel(name)
	}
	out, err := r.runsc(ctx, m.Flags, "events", "--stats", name)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return runtime.Stats{}, runtime.ErrNotFound
		}
		return runtime.Stats{}, err
	}
	var ev struct {
		Data struct {
			CPU struct {
				Usage struct{ Total uint64 }
			}
			Memory struct {
				Usage struct{ Usage uint64 }
			}
			Pids struct{ Current uint64 }
		}
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		return runtime.Stats{}, fmt.Errorf("gvisor: runsc events: %w", err)
	}
	return runtime.Stats{CPUSeconds: float64(ev.Data.CPU.Usage.Total) / 1e9, MemoryBytes: int64(ev.Data.Memory.Usage.Usage), Processes: int(ev.Data.Pids.Current)}, nil
}

// Relabel replaces the labels of a container (runtime.Relabeler): they
// live in its bundle's meta, which List and the recovery read; runsc's
// own annotations are the start's and are not read back.
func (r *Runtime) Relabel(ctx context.Context, ref runtime.Ref, labels map[string]string) error {
	m, err := r.loadMeta(ref.Name)
	if err != nil {
		return err
	}
	if m.UID != ref.UID {
		return runtime.ErrConflict
	}
	if id := labels[runtime.LabelSandbox]; id == "" || id != m.Labels[runtime.LabelSandbox] {
		return fmt.Errorf("gvisor: relabel of %s must keep its sandbox label %q", m.Name, m.Labels[runtime.LabelSandbox])
	}
	r.mu.Lock()
	m.Labels = maps.Clone(labels)
	r.mu.Unlock()
	return writeJSON(filepath.Join(r.bundles, m.Name, "meta.json"), m)
}

// SetNetwork replaces the policy of a sandbox created with a network.
func (r *Runtime) SetNetwork(ctx context.Context, name string, rules *netpolicy.Rules) error {
	m, err := r.loadMeta(name)
	if err != nil {
		return err
	}
	if m.Net == nil || m.Net.Index == 0 {
		return runtime.ErrNoNetwork
	}
	mgr, err := r.egress()
	if err != nil {
		return err
	}
	if err := mgr.Update(m.Net.Key, rules); err != nil {
		return err
	}
	r.mu.Lock()
	m.Net.Policy = rules.Policy()
	r.mu.Unlock()
	return writeJSON(filepath.Join(r.bundles, m.Name, "meta.json"), m)
}
