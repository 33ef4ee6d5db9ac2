// Package server wires the parts into one running service: the per-org
// store, the runtime backend (gvisor: runsc on this machine; kube: pods
// through client-go), the service core, the console, the interpreter, the
// typed ops and MCP, the reaper, and the HTTP API. Its Config composes the
// configuration each part owns. The binary and the integration tests build
// the server the same way, through New.
package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/contexts"
	"github.com/sandboxd/sandbox/internal/credential"
	"github.com/sandboxd/sandbox/internal/files"
	"github.com/sandboxd/sandbox/internal/host"
	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/internal/meter"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/processes"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/relay/pool"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/stats"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/terminal"
	"github.com/sandboxd/sandbox/internal/usage"
	"github.com/sandboxd/sandbox/internal/volumes"
	"github.com/sandboxd/sandbox/internal/warm"
)

// Config is what the server needs to start. It composes the
// configuration each part owns (each with its flags, zero values and
// Validate) and adds only what is the server's own.
type Config struct {
	// Data is the data directory (required).
	Data string
	// Images holds the built class images; empty means Data/images.
	Images string
	// Backend is "gvisor" (runsc on this machine; also the zero value) or
	// "kube" (pods through client-go).
	Backend string
	// Runner is the host path of cmd/sandbox-runner, mounted into every
	// sandbox for the code interpreter; empty runs interpreter programs
	// through a shell script instead (slower, same answers).
	Runner string
	// BootstrapKeyFile holds an API key (store.CheckKeyFormat) that the
	// server makes an admin key of the operator org at every start (see
	// ensureBootstrapKey); empty: none. The Helm chart mounts its Secret
	// here, so a fresh install has a key without a shell in the pod.
	BootstrapKeyFile string

	GVisor   gvisor.Options
	Kube     kube.Options
	Service  service.Config
	Reaper   reaper.Config
	API      api.Config
	Preview  preview.Config
	Identity identity.Config
	Meter    meter.Config
	Catalog  catalog.Config
	Warm     warm.Config
}

// RegisterFlags defines every server flag on fs, writing into c: the
// server's own and those of each part.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Data, "data", "", "data directory: per-org stores, API keys, runtime state (required)")
	fs.StringVar(&c.Images, "images", "", "directory of built class images (default DATA/images)")
	fs.StringVar(&c.Backend, "runtime", BackendGVisor, "where sandboxes run: gvisor (runsc on this machine) or kube (pods on a cluster)")
	c.Runner = DefaultRunner()
	fs.Var((*runnerFlag)(&c.Runner), "runner", "the code interpreter's in-sandbox runner (cmd/sandbox-runner; default: beside this binary, else "+InstalledRunner+"); \"none\" runs programs through sh instead")
	fs.StringVar(&c.BootstrapKeyFile, "bootstrap-key-file", "", "a file holding one API key (sbk_ and 52 characters of a-z, 2-7, as sandbox keys create prints) that every start makes an admin key of the operator org (--operator-org) if it is not one yet: the first key of an install that has no shell (the Helm chart mounts its Secret here). Its mode is not checked (a Kubernetes Secret volume is group-readable): keep the file where only the server can read it. A revoked bootstrap key is made again at the next start: to retire it, change the file's key or drop the flag")
	c.Service.RegisterFlags(fs)
	c.Reaper.RegisterFlags(fs)
	c.API.RegisterFlags(fs)
	c.Preview.RegisterFlags(fs)
	c.Identity.RegisterFlags(fs)
	c.Meter.RegisterFlags(fs)
	c.Catalog.RegisterFlags(fs)
	c.Warm.RegisterFlags(fs)
	c.GVisor.RegisterFlags(fs)
	c.Kube.RegisterFlags(fs)
}

// runnerFlag is --runner: a path, or "none" for no runner (the empty
// string of Config.Runner).
type runnerFlag string

func (f *runnerFlag) String() string {
	if f == nil || *f == "" {
		return "none"
	}
	return string(*f)
}

func (f *runnerFlag) Set(v string) error {
	if v == "none" {
		v = ""
	}
	*f = runnerFlag(v)
	return nil
}

// Validate checks the whole configuration, each part by its own rules,
// before anything is opened.
func (c *Config) Validate() error {
	if c.Data == "" {
		return errors.New("--data is required")
	}
	errs := []error{c.Service.Validate(), c.Reaper.Validate(), c.API.Validate(), c.Preview.Validate(), c.Identity.Validate()}
	switch c.Backend {
	case "", BackendGVisor:
		errs = append(errs, c.GVisor.Validate())
	case BackendKube:
		errs = append(errs, c.Kube.Validate())
	default:
		errs = append(errs, fmt.Errorf("--runtime must be gvisor or kube, not %q", c.Backend))
	}
	if c.Runner != "" {
		if st, err := os.Stat(c.Runner); err != nil || !st.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("runner not found at %s: run scripts/deps.sh, or pass --runner none", c.Runner))
		}
	}
	if set := meter.EnvFees(os.Getenv); len(set) > 0 {
		errs = append(errs, fmt.Errorf("%s: fees are no longer read from the environment; pass --fee N (every class) or --fee CLASS=N instead, and unset it", strings.Join(set, ", ")))
	}
	return errors.Join(errs...)
}

// withDefaults is the place the server's own defaults are applied (each
// part applies its own).
func (c Config) withDefaults() Config {
	if c.Images == "" {
		c.Images = filepath.Join(c.Data, "images")
	}
	if c.Backend == "" {
		c.Backend = BackendGVisor
	}
	return c
}

// Server is a wired service.
type Server struct {
	Handler http.Handler
	Store   *store.Store
	Runtime runtime.Runtime
	Service *service.Service
	Reaper  *reaper.Reaper
	Metrics *metrics.Metrics
	// Sessions are the narrated session logs. Their writer runs from New
	// to Close, so no event is lost between the two.
	Sessions *narrate.Log
	// Auth is every door's bearer check (API keys, JWTs).
	Auth *identity.Authenticator

	api          *api.Server
	issuer       *identity.Issuer // nil without an issuer URL
	stopSessions context.CancelFunc
	relays       *pool.Pool // nil without a runner
	warm         *warm.Pool // nil where leases start their own
	files        *files.Files
}

// Version is what the server says it is (MCP's implementation version,
// the OpenAPI document's info.version). A build may stamp its own:
// go build -ldflags "-X github.com/sandboxd/sandbox/internal/server.Version=0.2.0+abc"
// (scripts/server-image.sh does, so an upgrade can be told apart).
var Version = "0.2.0"

// New opens the store and the runtime and builds the handler.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Data == "" {
		return nil, errors.New("server: a data directory is required")
	}
	cfg = cfg.withDefaults()
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, err
	}
	// The links' secret is made on the first start and kept in the data
	// directory: links outlive a restart, and never appear in an answer.
	if err := ensureBootstrapKey(ctx, st, cfg.BootstrapKeyFile, operatorOrg(cfg), log); err != nil {
		st.Close()
		return nil, err
	}
	signer, err := preview.LoadKey(cfg.Data)
	if err != nil {
		st.Close()
		return nil, err
	}
	b, err := newBackend(ctx, cfg, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	m := metrics.New()
	sessions := narrate.New(st, log)
	id, err := newIdentity(cfg, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	// What the backend can do beyond its core, found once for every part.
	caps := runtime.Discover(b.rt)
	// The volumes' deleter owns the project locks a lease takes.
	vols := volumes.New(st, b.rt, log)
	// One count of each org's commands, the service's work and the
	// followers' slots alike.
	cmds := &quota.Commands{}
	// The relays are made on the service (their channels are its); the
	// service holds them through this, once they are.
	var relays *pool.Pool // the sandboxes' relays: previews, the process daemon, the API socket
	holds := lateRelays{&relays}
	// The lease credentials, where an issuer or exchange endpoint makes
	// them: written with the backend's own exec, after no queue.
	var creds service.Credentials
	if id.exchanger != nil {
		creds = credential.New(credential.Deps{Exchanger: id.exchanger, Verify: &id.verify, Rows: st,
			Exec: b.rt.Exec, Runner: caps.Runner, Relays: holds, OperatorOrg: operatorOrg(cfg), Log: log})
	}
	// Exec sandboxes started ahead of their leases, where the backend can
	// give one to its lease (Run keeps the pool full).
	var warmed *warm.Pool
	if caps.Relabel != nil {
		exec := sandbox.MustClass(sandbox.ClassExec)
		warmed = warm.New(cfg.Warm, b.rt, exec.Name, exec.Image, service.WarmSpec(exec, sandbox.RuntimeGVisor), log)
		if warmed.Size() == 0 {
			warmed = nil
		}
	} else if cfg.Warm.Size > 0 {
		// Asked for by name on a backend that cannot hand a started
		// sandbox to a lease: said once, not ignored in silence.
		log.Warn("--warm-pool is not available on this backend: each lease starts its own sandbox", "backend", cfg.Backend, "warmPool", cfg.Warm.Size)
	}
	svc := service.New(cfg.Service, service.Deps{Warm: warmPool(warmed), Capabilities: &caps, ProjectLocks: vols, Commands: cmds, Credentials: creds,
		Store: st, Runtime: b.rt, RuntimeName: sandbox.RuntimeGVisor,
		Meter:      &meter.Meter{Fees: cfg.Meter.Fees, Ledger: st},
		ImageReady: b.imageReady, Metrics: m, Narrator: sessions, Log: log,
		Quotas: st, Host: host.New(cfg.Data), Library: b.library, Images: st,
	})
	if err := reconcile(ctx, st, b, svc, sessions, log); err != nil {
		st.Close()
		return nil, err
	}
	auth := id.authenticator(st, log)
	sessCtx, stopSessions := context.WithCancel(context.WithoutCancel(ctx))
	go sessions.Run(sessCtx)
	if caps.Runner != nil {
		relays = pool.New(b.rt, caps.Runner, svc)
		relays.Log = log
		relays.Forward = caps.Forward
		relays.Init, _ = b.rt.(pool.InitLinks)
		relays.Count = m.PortConnection
	}
	previews := preview.NewPreviews(svc, preview.Relay{Pool: relays, Backend: sandbox.RuntimeGVisor}, signer, cfg.Preview, cfg.Service.PublicPreviews, st, st)
	fsys := files.New(svc, cfg.Service.ExecTimeout, cfg.Service.MaxExecTimeout).WithRunner(caps.Runner, sandbox.RuntimeGVisor)
	fs := files.Join(svc, fsys)
	// The interpreter runs a program through the runner where sandboxes
	// have one, else through the shell.
	it := interp.New(fs, cfg.Service.Timeouts(), caps.Runner, log)
	report := usage.New(cfg.Service.Quota, st, st, cmds)
	images := catalog.New(cfg.Catalog, fs, report, st, b.library, caps.Diff, sandbox.RuntimeGVisor, log).WithClasses(b.classes)
	procs := processes.New(svc, st, b.rt, caps.Runner, relays, sandbox.RuntimeGVisor, sessions, log)
	svc.SetProcesses(procs)
	ctxs := contexts.New(procs, svc)
	it.WithContexts(ctxs)
	if relays != nil {
		// A background process may call from inside too: its sandbox's
		// relay outlives the linger while one runs.
		relays.Busy = func(ctx context.Context, sb *sandbox.Sandbox) bool {
			return procs.Running(sandbox.WithPrincipal(ctx, sandbox.Principal{Org: sb.Org, Subject: "relay"}), sb)
		}
	}
	typed := ops.New(fs, procs, images, it).WithPreviews(previews)
	consoles := terminal.New(svc, nil)
	if relays != nil {
		consoles.WithPorts(relays)
	}
	h := api.New(api.Deps{
		Leases: svc, Work: svc, Stats: stats.New(svc, caps.Stats, sandbox.RuntimeGVisor), Volumes: vols, Files: fs.Files, Processes: procs, Contexts: ctxs, Images: images, Ports: previews, Quotas: report, Operator: st, Consoles: consoles, Interpreter: it, Ops: typed, Auth: auth,
		Metrics: m.Handler(), Sessions: sessions, Narrator: sessions, MCP: mcpserver.New(typed, mcpAuth{auth, st}, log, Version), Keys: st, Version: Version,
		Issuer: id.issuerRoutes(), Backend: cfg.Backend, Capabilities: capabilityNames(caps.Names()),
	}, log, cfg.API)
	if relays != nil && id.exchanger != nil {
		// The sandboxes' own calls, made with their lease credentials
		// on their API sockets, are served like any other.
		relays.API = h.Handler()
		if warmed != nil {
			// A warm sandbox's relay is up before its lease (pool.Warm):
			// started in the background, so the pool's next start does not
			// wait for it, and a lease that takes the sandbox sooner waits
			// for it as any lease does.
			warmed.Prime = func(ctx context.Context, w warm.Sandbox) func(bool) {
				return relays.Warm(ctx, &sandbox.Sandbox{ID: w.ID, Name: w.Object.Name, UID: w.Object.UID})
			}
		}
	}
	return &Server{
		Handler: h.Handler(), api: h, issuer: id.issuer, Auth: auth,
		Store: st, Runtime: b.rt, Service: svc, Metrics: m, Sessions: sessions, stopSessions: stopSessions, relays: relays, files: fsys,
		Reaper: &reaper.Reaper{Config: cfg.Reaper, Ceiling: cfg.Service.Ceiling, Store: st, Service: svc, Runtime: b.rt, Log: log,
			Keep: warmed.Holds},
		warm: warmed,
	}, nil
}

// warmPool is p as the service's Warm: none when p is nil.
func warmPool(p *warm.Pool) service.Warm {
	if p == nil {
		return nil
	}
	return p
}

// lateRelays are the credential's Relays: the pool once it is made (after
// the service, whose channels its relays are), none before.
type lateRelays struct{ p **pool.Pool }

func (l lateRelays) Hold(ctx context.Context, sb *sandbox.Sandbox) func() {
	if *l.p == nil {
		return func() {}
	}
	return (*l.p).Hold(ctx, sb)
}

func (l lateRelays) Credential(ctx context.Context, sb *sandbox.Sandbox, token string) error {
	if *l.p == nil {
		return errors.New("no relays")
	}
	return (*l.p).Credential(ctx, sb, token)
}

// BootstrapSubject is the subject recorded beside the bootstrap key.
const BootstrapSubject = "bootstrap"

// ensureBootstrapKey makes the key in path an admin key of the operator
// org unless it is one already (idempotent: a restart changes nothing).
// A malformed key refuses the start with the file's name and what is
// wrong, never the key; so does a key that is another org's or scope's.
func ensureBootstrapKey(ctx context.Context, st *store.Store, path, org string, log *slog.Logger) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--bootstrap-key-file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return fmt.Errorf("--bootstrap-key-file %s is empty: put one key in it (sandbox keys create prints the shape)", path)
	}
	k, created, err := st.EnsureKey(ctx, org, BootstrapSubject, store.ScopeAdmin, secret)
	if err != nil {
		return fmt.Errorf("--bootstrap-key-file %s: %w", path, err)
	}
	log.Info("bootstrap key ensured", "key", k.ID, "org", org, "scope", k.Scope, "created", created)
	return nil
}

// capabilityNames are the capabilities as the API names them.
func capabilityNames(caps []runtime.Capability) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = string(c)
	}
	return out
}

// DefaultRunner finds cmd/sandbox-runner: beside the running executable
// (bin/ of a checkout), else where scripts/deps.sh installs it; "" when
// neither exists.
func DefaultRunner() string {
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "sandbox-runner"))
	}
	candidates = append(candidates, InstalledRunner)
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c
		}
	}
	return ""
}

// InstalledRunner is where scripts/deps.sh installs the runner.
const InstalledRunner = "/usr/local/libexec/sandbox/sandbox-runner"

// reconcile brings the server's view up to date before its first call, in
// one pass over the orgs: every row matched with the runtime (see
// service.Recover, which also counts the live gauge), and session events
// numbered after every stored one.
func reconcile(ctx context.Context, st *store.Store, b backend, svc *service.Service, sessions *narrate.Log, log *slog.Logger) error {
	// A killed server's last runtime commands may still be finishing.
	if b.settle != nil {
		if err := b.settle(ctx); err != nil {
			return err
		}
	}
	list, err := b.rt.List(ctx, map[string]string{runtime.LabelSandbox: ""})
	if err != nil {
		return err
	}
	objs := map[string]runtime.Object{}
	for _, o := range list {
		objs[o.Name] = o
	}
	orgs, err := st.Orgs(ctx)
	if err != nil {
		return err
	}
	var total service.RecoverResult
	for _, org := range orgs {
		octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "server"})
		res, err := svc.Recover(octx, objs)
		if err != nil {
			return fmt.Errorf("recovering org %q: %w", org, err)
		}
		total.Adopted += res.Adopted
		total.Lost += res.Lost
		total.Failed += res.Failed
		seq, err := st.MaxEventSeq(octx)
		if err != nil {
			return err
		}
		sessions.Seed(seq)
	}
	log.Info("recovered sandboxes", "adopted", total.Adopted, "lost", total.Lost, "interrupted", total.Failed, "runtimeObjects", len(list))
	return nil
}

// Run runs the background work (the reaper, the warm pool) until ctx ends,
// and returns once it has drained.
func (s *Server) Run(ctx context.Context) {
	if s.issuer != nil {
		done := make(chan struct{})
		go func() { defer close(done); s.issuer.Run(ctx) }()
		defer func() { <-done }()
	}
	if s.warm != nil {
		// It deletes what it holds when ctx ends, before Run returns.
		done := make(chan struct{})
		go func() { defer close(done); s.warm.Run(ctx) }()
		defer func() { <-done }()
	}
	s.Reaper.Run(ctx)
}

// Drain starts a shutdown: not ready, long streams and consoles ended
// with a reason to reconnect, calls in flight left to finish (see
// api.Server.Drain).
func (s *Server) Drain() { s.api.Drain() }

// Close stores the session events still queued and closes the store.
// Sandboxes keep running: a restart re-adopts them.
func (s *Server) Close() error {
	s.api.Close()
	s.files.Close() // the file watches waiting for their streams
	if s.relays != nil {
		s.relays.Close()
	}
	s.stopSessions()
	s.Sessions.Wait()
	var rerr error
	if c, ok := s.Runtime.(interface{ Close() error }); ok {
		rerr = c.Close() // the gvisor backend's resolver and proxy
	}
	return errors.Join(rerr, s.Store.Close())
}
