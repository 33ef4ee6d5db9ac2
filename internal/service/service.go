// Package service is the core of the product, independent of HTTP: it
// leases a sandbox through the checks in their stated order, gets, lists,
// renews, ends, sleeps, wakes and recovers it, and runs programs in it —
// exec, the file protocol, and Run, the one exec primitive that the
// terminal and the interpreter are built on. Every status change goes
// through one guarded transition (transition.go), which also moves the
// live gauge; every program's end is classified in one place (run.go).
//
// It owns no state but the work in flight: rows live in the store,
// containers in the runtime, both reached through interfaces.
package service

import (
	"context"
	"errors"
	"flag"
	"github.com/sandboxd/sandbox/wire"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/flagx"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/warm"
)

// Store is the part of the store the service needs. Every call is scoped to
// the org in ctx.
type Store interface {
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error)
	LiveInProject(ctx context.Context, project string) (*sandbox.Sandbox, error)
	Insert(ctx context.Context, sb *sandbox.Sandbox, admit store.Admit) error
	Use(ctx context.Context, project string) (quota.Use, bool, error)
	DropProject(ctx context.Context, name string, ifFree bool) (store.Project, error)
	Transition(ctx context.Context, id string, from sandbox.Status, next *sandbox.Sandbox) error
	Touch(ctx context.Context, id string, at time.Time) error
	SetExpiry(ctx context.Context, id string, at time.Time) error
	SetMetadata(ctx context.Context, id string, m map[string]string) error
	SetNetwork(ctx context.Context, id string, p *netpolicy.Policy) error
	AddUsage(ctx context.Context, class string, leases int64, d time.Duration) error
	ProcessStore
}

// ProcessStore is the part of the store a fork needs of the background
// processes' records: it copies them to the fork.
type ProcessStore interface {
	PutProcess(ctx context.Context, p store.Process) error
	Processes(ctx context.Context, id string) ([]store.Process, error)
}

// ProcessKeeper is what the lifecycle needs of the background processes
// (internal/processes, which stands on this service and is handed back to
// it once made: SetProcesses).
type ProcessKeeper interface {
	// StartIn starts a process in dir as is (an image's own command, for
	// a lease with "run").
	StartIn(ctx context.Context, id string, req wire.ProcessRequest, dir string) (*wire.Process, error)
	// Running says whether sb has a process running: the idle sleep
	// leaves such a sandbox awake.
	Running(ctx context.Context, sb *sandbox.Sandbox) bool
}

// ProjectLocks serialise a lease of a project with the deletion of its
// volume, so that a volume is never deleted under a sandbox starting on it:
// the deleter (internal/volumes) owns the locks, and a lease holds its
// project's from before its row is claimed until the container runs.
type ProjectLocks interface {
	LockProject(org, project string) (unlock func())
}

// Meter gates and debits a lease (kind "sandbox"). The refund gives the fee
// back when the lease fails after the gate. A nil Meter is free.
type Meter interface {
	Charge(ctx context.Context, org, kind, class string) (refund func(context.Context) error, err error)
}

// Quotas are the per-org overrides of the quota policy.
type Quotas interface {
	OrgQuota(ctx context.Context, org string) (quota.Policy, error)
}

// Host reports the machine's headroom: available memory and free space on
// the data disk, in MiB.
type Host interface {
	Headroom(ctx context.Context) (memoryMiB, diskMiB int64, err error)
}

// Config is the service's policy: what an operator sets with flags. A zero
// field means its default (below); Validate refuses the rest of the
// nonsense.
type Config struct {
	// Ceiling bounds every lease from its creation; zero means
	// sandbox.DefaultCeiling (24 h).
	Ceiling time.Duration
	// ExecTimeout is the timeout of a command (and of a file operation)
	// that names none; zero means 60 s.
	ExecTimeout time.Duration
	// MaxExecTimeout caps a caller's timeoutSec; zero means 10 min.
	MaxExecTimeout time.Duration
	// StartTimeout bounds a container start or wake; zero means 60 s.
	StartTimeout time.Duration
	// Quota is every org's policy unless the operator overrides it for
	// one; nil fields take quota.Default's.
	Quota quota.Policy
	// ReserveMemoryMiB and ReserveDiskMiB are the host headroom a start
	// (lease, wake, restore) must leave: the host's available memory less
	// the class's memory limit, and the data disk's free space. Zero
	// means DefaultReserve*, negative none (the flags' 0).
	ReserveMemoryMiB int64
	ReserveDiskMiB   int64
	// ImageAllowRoot lets an image whose config says root run as root
	// (without capabilities, inside the sandbox); refused otherwise.
	ImageAllowRoot bool
	// NetworkAllow are the egress entries tenants may ask for ("internet",
	// "*" for any domain, domains, wildcards, CIDRs); empty allows only
	// none. NetworkPrivate are the private ranges opened to policies that
	// allow them (never reachable otherwise). See netpolicy.ParseBounds.
	NetworkAllow, NetworkPrivate []string
	// PublicPreviews lets a lease ask for public ports (previews with no
	// key or link); off, such a lease is refused.
	PublicPreviews bool

	network netpolicy.Bounds // parsed from the two above by New
}

// NetworkBounds parses NetworkAllow and NetworkPrivate.
func (c Config) NetworkBounds() (netpolicy.Bounds, error) {
	return netpolicy.ParseBounds(c.NetworkAllow, c.NetworkPrivate)
}

// Defaults of the zero Config fields.
const (
	DefaultExecTimeout    = 60 * time.Second
	DefaultMaxExecTimeout = 10 * time.Minute
	DefaultStartTimeout   = 60 * time.Second

	DefaultReserveMemoryMiB = 512
	DefaultReserveDiskMiB   = 1024
)

// withDefaults is THE place the defaults are applied.
func (c Config) withDefaults() Config {
	if c.Ceiling == 0 {
		c.Ceiling = sandbox.DefaultCeiling
	}
	if c.ExecTimeout == 0 {
		c.ExecTimeout = DefaultExecTimeout
	}
	if c.MaxExecTimeout == 0 {
		c.MaxExecTimeout = DefaultMaxExecTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	c.Quota = quota.Default().Over(c.Quota)
	if c.ReserveMemoryMiB == 0 {
		c.ReserveMemoryMiB = DefaultReserveMemoryMiB
	}
	if c.ReserveDiskMiB == 0 {
		c.ReserveDiskMiB = DefaultReserveDiskMiB
	}
	return c
}

// RegisterFlags defines the service's flags on fs, writing into c; the
// defaults shown are those of the zero fields.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := c.withDefaults()
	fs.DurationVar(&c.Ceiling, "ceiling", d.Ceiling, "absolute bound on any lease, counted from its creation")
	fs.DurationVar(&c.ExecTimeout, "exec-timeout", d.ExecTimeout, "timeout of a command that names none (timeoutSec 0), and of each file operation")
	fs.DurationVar(&c.MaxExecTimeout, "max-exec-timeout", d.MaxExecTimeout, "the largest timeoutSec a caller may ask for; larger ones are cut to it")
	fs.DurationVar(&c.StartTimeout, "start-timeout", d.StartTimeout, "how long a sandbox may take to start or wake before the lease fails (503)")
	c.ReserveMemoryMiB, c.ReserveDiskMiB = d.ReserveMemoryMiB, d.ReserveDiskMiB
	fs.Var(flagx.Int64Off(&c.ReserveMemoryMiB), "reserve-memory-mib", "host memory (MiB) a start must leave available beyond the class's limit, else 503; 0 keeps none")
	fs.Var(flagx.Int64Off(&c.ReserveDiskMiB), "reserve-disk-mib", "free space (MiB) on the data disk below which starts are refused (503); 0 keeps none")
	fs.Func("network-allow", "what tenants may let a sandbox reach (a lease's network.allow): internet (every public address), * (any domain), a domain, *.domain, or an IPv4 CIDR; repeatable or comma-separated; none by default, so sandboxes have no network", func(v string) error {
		for e := range strings.SplitSeq(v, ",") {
			c.NetworkAllow = append(c.NetworkAllow, strings.TrimSpace(e))
		}
		_, err := netpolicy.ParseBounds(c.NetworkAllow, nil)
		return err
	})
	fs.Func("network-private", "a private IPv4 range (inside 10/8, 172.16/12, 192.168/16, 100.64/10) that a sandbox's policy may reach when it allows it and --network-allow covers it; never reachable otherwise; repeatable", func(v string) error {
		c.NetworkPrivate = append(c.NetworkPrivate, v)
		_, err := netpolicy.ParseBounds(nil, c.NetworkPrivate)
		return err
	})
	fs.BoolVar(&c.PublicPreviews, "public-previews", false, "let a lease ask for publicPorts: port previews anyone with the URL opens, with no key or link (for demos); a lease asking is refused (403) while this is off, and turning it off closes those already leased")
	fs.BoolVar(&c.ImageAllowRoot, "image-allow-root", false, "let an image whose config's User is root run as root inside its sandbox (never with capabilities); refused by default")
	c.Quota.RegisterFlags(fs)
}

// Validate refuses a configuration the service cannot keep.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--ceiling", c.Ceiling}, {"--exec-timeout", c.ExecTimeout}, {"--max-exec-timeout", c.MaxExecTimeout}, {"--start-timeout", c.StartTimeout}} {
		if d.v < 0 {
			return errors.New(d.name + " must not be negative")
		}
	}
	if d := c.withDefaults(); d.ExecTimeout > d.MaxExecTimeout {
		return errors.New("--exec-timeout must not exceed --max-exec-timeout")
	}
	if c.ReserveMemoryMiB < 0 || c.ReserveDiskMiB < 0 {
		return errors.New("--reserve-memory-mib and --reserve-disk-mib must not be negative")
	}
	if _, err := c.NetworkBounds(); err != nil {
		return err
	}
	return c.Quota.Validate()
}

// Deps are the parts the service is built from. Store and Runtime are
// required; the rest may be nil.
type Deps struct {
	Store Store
	// Runtime is the isolation backend: its core, its volumes, and the
	// capabilities it has (Capabilities).
	Runtime runtime.Backend
	// Capabilities are what Runtime can do beyond its core; nil means
	// runtime.Discover(Runtime), a test's fake may be given fewer.
	Capabilities *runtime.Capabilities
	// RuntimeName is what the backend provides (e.g. "gvisor"): the default
	// and the only runtime offered. Empty means "gvisor".
	RuntimeName string
	// ProjectLocks are the volume deleter's locks of projects; nil means
	// locks of the service's own, which no deleter shares (a service
	// whose volumes nothing else deletes: tests).
	ProjectLocks ProjectLocks
	// Meter gates leases; nil is free.
	Meter Meter
	// ImageReady reports whether an image can run; nil means every image
	// can.
	ImageReady func(name string) error
	// Metrics records leases, live sandboxes and command latency; nil
	// records nothing.
	Metrics *metrics.Metrics
	// Narrator keeps the live logs of named sessions; nil narrates nothing.
	Narrator narrate.Appender
	// Quotas holds the operator's per-org quota overrides; nil means none.
	Quotas Quotas
	// Commands counts each org's running commands, shared with the
	// work that runs no program (internal/usage's Acquire); nil means a
	// count of the service's own.
	Commands *quota.Commands
	// Host tells the machine's headroom for admission; nil admits every
	// start.
	Host Host
	// Library finds pulled images, and Images resolves an org's image
	// names; nil keeps none but the classes'.
	Library Library
	Images  ImageStore
	// Credentials hand each lease its own credential and keep it
	// (internal/credential); nil hands none.
	Credentials Credentials
	// Warm hands out sandboxes started ahead of their leases
	// (internal/warm); nil, or a backend that cannot relabel, starts each.
	Warm Warm
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log is where the service logs; nil discards.
	Log *slog.Logger
}

// Credentials are the lease credentials (internal/credential): each
// lease's own, written into its sandbox in the background.
type Credentials interface {
	// Hand obtains sb's credential for the caller in ctx and writes it
	// in; inherited says the container holds another's (a fork).
	Hand(ctx context.Context, sb *sandbox.Sandbox, inherited bool)
	// Rewrite writes sb's credential in again after a wake.
	Rewrite(ctx context.Context, sb *sandbox.Sandbox)
	// Wait returns once no write into sandbox id is in flight: every
	// command waits, so none runs before its credential is in place.
	Wait(ctx context.Context, id string) error
	// Forget drops sandbox id's credential: its lease ended.
	Forget(id string)
	// HoldRelay keeps sb's API socket open while the caller's code runs.
	HoldRelay(ctx context.Context, sb *sandbox.Sandbox) (release func())
}

// Warm hands out sandboxes started ahead of their leases, made from
// WarmSpec (internal/warm).
type Warm interface {
	// Take hands out one of class on image, its id and object, or false.
	Take(class, image string) (warm.Sandbox, bool)
	// Settled says the lease that took the object named name has
	// written its row (or deleted the object).
	Settled(name string)
}

// noCredentials hands none.
type noCredentials struct{}

func (noCredentials) Hand(context.Context, *sandbox.Sandbox, bool)       {}
func (noCredentials) Rewrite(context.Context, *sandbox.Sandbox)          {}
func (noCredentials) Wait(context.Context, string) error                 { return nil }
func (noCredentials) Forget(string)                                      {}
func (noCredentials) HoldRelay(context.Context, *sandbox.Sandbox) func() { return func() {} }

// Service implements the sandbox operations.
type Service struct {
	cfg  Config
	d    Deps
	log  *slog.Logger
	caps runtime.Capabilities
	// procs are the background processes (SetProcesses); nil: none.
	procs ProcessKeeper
	cmds  inflight

	locksMu sync.Mutex
	locks   map[string]*idLock // per sandbox: sleep, wake and end; per org: making an image
}

// New returns a Service; cfg's zero fields take their defaults.
func New(cfg Config, d Deps) *Service {
	if d.RuntimeName == "" {
		d.RuntimeName = sandbox.RuntimeGVisor
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	// Validate refused bad bounds; a caller that skipped it gets none,
	// the safe side.
	cfg.network, _ = cfg.NetworkBounds()
	caps := runtime.Discover(d.Runtime)
	if d.Capabilities != nil {
		caps = *d.Capabilities
	}
	if d.Credentials == nil {
		d.Credentials = noCredentials{}
	}
	if d.Commands == nil {
		d.Commands = &quota.Commands{}
	}
	return &Service{cfg: cfg, d: d, log: d.Log, caps: caps, cmds: inflight{orgs: d.Commands}}
}

// SetProcesses hands the service its background processes, which are made
// on it (internal/processes); until then a lease with "run" is refused and
// no process keeps a sandbox awake.
func (s *Service) SetProcesses(k ProcessKeeper) { s.procs = k }

// unsupported is runtime.Unsupported of this server's backend.
func (s *Service) unsupported(c runtime.Capability) error {
	return runtime.Unsupported(s.d.RuntimeName, c)
}

// Use is the seam the service's neighbours (internal/catalog, …) stand
// on: it opens a piece of work on a running sandbox of the caller's org,
// waking it, counted against the org's commands quota; done ends it, and
// Stop cancels work.
func (s *Service) Use(ctx context.Context, id string) (*sandbox.Sandbox, context.Context, func(), error) {
	return s.use(ctx, id, true)
}

// Channel holds a channel open into sb, a sandbox the caller reached by
// Use: a long-lived exec that later work rides on (the preview relay). It
// is no command — not counted, and it keeps nothing awake — and its
// context ends when the sandbox sleeps, is stopped or ends, or done is
// called; work on it still goes through Use.
func (s *Service) Channel(sb *sandbox.Sandbox) (context.Context, func()) {
	return s.cmds.hold(context.Background(), sb.ID)
}

func (s *Service) now() time.Time { return s.d.Now().UTC() }
