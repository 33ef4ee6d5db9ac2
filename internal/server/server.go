// Package server wires the parts into one running service: the per-org
// store, the gvisor runtime, the service, and the HTTP API. The binary and
// the integration tests build the server the same way, through New.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/internal/meter"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

// Config is what the server needs to start. Zero values are documented per
// field.
type Config struct {
	Data     string        // data directory (required)
	Images   string        // built images; empty means Data/images
	Runsc    string        // the runsc binary (required)
	Platform string        // gVisor platform; empty means systrap
	Ceiling  time.Duration // absolute lease bound; zero means 24 h
	// ReapEvery is the reaper's interval; zero means one minute.
	ReapEvery time.Duration
	// IdleAfter puts a sandbox unused this long to sleep; zero means one
	// hour, negative never.
	IdleAfter time.Duration
	// SweepGrace is how old an unclaimed runtime object must be before the
	// sweep deletes it; zero means reaper.DefaultGrace.
	SweepGrace time.Duration
	// OperatorOrg is the reserved org that reads operator routes; empty
	// means "system".
	OperatorOrg string
	// Runner is the host path of cmd/sandbox-runner, mounted into every
	// sandbox for the code interpreter; empty runs interpreter programs
	// through a shell script instead (slower, same answers).
	Runner string
	// FrameAncestors is who may frame the terminal and screen pages (a CSP
	// source list); empty means "'self'".
	FrameAncestors string
	// Backend is "gvisor" (runsc on this machine, the default) or "kube"
	// (pods through client-go; see Kube).
	Backend string
	Kube    KubeConfig
	// Getenv reads the fee settings (SANDBOX_FEE_CENTS...); nil means
	// os.Getenv.
	Getenv func(string) string
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

	api          *api.Server
	stopSessions context.CancelFunc
}

// Version is what the server says it is (MCP's implementation version).
const Version = "0.2.0"

// New opens the store and the runtime and builds the handler.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Ceiling <= 0 {
		cfg.Ceiling = sandbox.DefaultCeiling
	}
	if cfg.ReapEvery <= 0 {
		cfg.ReapEvery = time.Minute
	}
	if cfg.IdleAfter == 0 {
		cfg.IdleAfter = time.Hour
	}
	if cfg.Images == "" {
		cfg.Images = filepath.Join(cfg.Data, "images")
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, err
	}
	b, err := newBackend(cfg, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	m := metrics.New()
	sessions := narrate.New(st, log)
	svc := service.New(service.Config{
		Narrator:   sessions,
		Runner:     b.runner,
		Ceiling:    cfg.Ceiling,
		ImageReady: b.imageReady,
		Metrics:    m,
	}, st, b.rt, &meter.Meter{Fees: meter.FeesFromEnv(cfg.Getenv), Ledger: st}, log)
	if err := reconcile(ctx, st, b, svc, m, sessions, log); err != nil {
		st.Close()
		return nil, err
	}
	sessCtx, stopSessions := context.WithCancel(context.WithoutCancel(ctx))
	go sessions.Run(sessCtx)
	typed := ops.New(svc)
	h := api.New(svc, typed, st, log, api.Options{
		OperatorOrg: cfg.OperatorOrg, Metrics: m.Handler(), Sessions: sessions, FrameAncestors: cfg.FrameAncestors,
		MCP: mcpserver.New(typed, st, log, Version),
	})
	return &Server{
		Handler: h, api: h,
		Store: st, Runtime: b.rt, Service: svc, Metrics: m, Sessions: sessions, stopSessions: stopSessions,
		Reaper: &reaper.Reaper{Store: st, Service: svc, Runtime: b.rt, Every: cfg.ReapEvery, Grace: cfg.SweepGrace, Log: log,
			Policy: reaper.Policy{Ceiling: cfg.Ceiling, IdleAfter: cfg.IdleAfter}},
	}, nil
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
// service.Recover), the live gauge counted from the stores (a restart does
// not reset it), and session events numbered after every stored one.
func reconcile(ctx context.Context, st *store.Store, b backend, svc *service.Service, m *metrics.Metrics, sessions *narrate.Log, log *slog.Logger) error {
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
	live := map[string]int{}
	for _, org := range orgs {
		octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "server"})
		res, err := svc.Recover(octx, objs)
		if err != nil {
			return fmt.Errorf("recovering org %q: %w", org, err)
		}
		total.Adopted += res.Adopted
		total.Lost += res.Lost
		total.Failed += res.Failed
		for _, class := range sandbox.ClassNames() {
			n, err := st.CountLive(octx, class)
			if err != nil {
				return err
			}
			live[class] += n
		}
		seq, err := st.MaxEventSeq(octx)
		if err != nil {
			return err
		}
		sessions.Seed(seq)
	}
	for _, class := range sandbox.ClassNames() {
		m.Live(class, float64(live[class]))
	}
	log.Info("recovered sandboxes", "adopted", total.Adopted, "lost", total.Lost, "interrupted", total.Failed, "runtimeObjects", len(list))
	return nil
}

// Run runs the background work (the reaper) until ctx ends, and returns once
// it has drained.
func (s *Server) Run(ctx context.Context) { s.Reaper.Run(ctx) }

// Close stores the session events still queued and closes the store.
// Sandboxes keep running: a restart re-adopts them.
func (s *Server) Close() error {
	s.api.Close()
	s.stopSessions()
	s.Sessions.Wait()
	return s.Store.Close()
}
