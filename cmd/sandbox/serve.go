package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/server"
)

// serveConfig is the server's configuration, from flags.
type serveConfig struct {
	Data      string
	Listen    string
	Images    string
	ReapEvery time.Duration
	Runsc     string
	Platform  string
	Ceiling   time.Duration
	Debug     bool
	Operator  string
	IdleAfter time.Duration
	Grace     time.Duration
	Runner    string
	Frames    string
	Backend   string
	Kube      server.KubeConfig
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Data, "data", "", "data directory: per-org stores, API keys, runtime state (required)")
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "address to serve HTTP on")
	fs.StringVar(&c.Images, "images", "", "directory of built class images (default DATA/images)")
	fs.DurationVar(&c.ReapEvery, "reap-every", time.Minute, "how often the reaper ends expired leases")
	fs.StringVar(&c.Runsc, "runsc", gvisor.DefaultRunsc(), "the runsc binary (env SANDBOX_RUNSC)")
	fs.StringVar(&c.Platform, "platform", "systrap", "gVisor platform: systrap or ptrace (kvm hangs on nested VMs)")
	fs.DurationVar(&c.Ceiling, "ceiling", 24*time.Hour, "absolute bound on any lease, counted from its creation")
	fs.BoolVar(&c.Debug, "debug", false, "log every request")
	fs.DurationVar(&c.IdleAfter, "idle-after", time.Hour, "put a sandbox unused this long to sleep (memory checkpointed); 0 never")
	fs.DurationVar(&c.Grace, "sweep-grace", 5*time.Minute, "age before a runtime object no row claims is swept")
	fs.StringVar(&c.Operator, "operator-org", "system", "the reserved operator org: its keys read /metrics")
	fs.StringVar(&c.Backend, "runtime", "gvisor", "where sandboxes run: gvisor (runsc on this machine) or kube (pods on a cluster)")
	fs.StringVar(&c.Kube.Kubeconfig, "kubeconfig", "", "kube: kubeconfig file (default: the in-cluster config of the server's pod)")
	fs.StringVar(&c.Kube.Namespace, "namespace", "sandboxes", "kube: namespace of the sandbox pods (never default, kube-* or the server's own)")
	fs.StringVar(&c.Kube.RuntimeClass, "runtime-class", "gvisor", "kube: RuntimeClass of the gvisor runtime (\"\" runs pods without one)")
	fs.StringVar(&c.Kube.ServerNamespace, "server-namespace", os.Getenv("POD_NAMESPACE"), "kube: the server's own namespace, refused for sandboxes (env POD_NAMESPACE)")
	fs.StringVar(&c.Kube.ServiceAccount, "service-account", "sandbox-pod", "kube: service account of the sandbox pods (its token is never mounted)")
	fs.StringVar(&c.Kube.StorageClass, "storage-class", "", "kube: StorageClass of project volumes (default: the cluster's)")
	fs.StringVar(&c.Frames, "frame-ancestors", "'self'", "who may embed the terminal and screen pages in a frame (a CSP source list, e.g. \"'self' https://app.example.com\")")
	fs.StringVar(&c.Runner, "runner", server.DefaultRunner(), "the code interpreter's in-sandbox runner (cmd/sandbox-runner); \"none\" runs programs through sh instead")
}

// Validate checks the configuration and fills the documented defaults.
func (c *serveConfig) Validate() error {
	if c.Data == "" {
		return errors.New("--data is required")
	}
	if c.Images == "" {
		c.Images = filepath.Join(c.Data, "images")
	}
	if c.ReapEvery <= 0 {
		return errors.New("--reap-every must be positive")
	}
	if c.Ceiling <= 0 {
		return errors.New("--ceiling must be positive")
	}
	switch c.Backend {
	case server.BackendGVisor:
		if _, err := os.Stat(c.Runsc); err != nil {
			return fmt.Errorf("runsc not found at %s: run scripts/deps.sh, or pass --runsc", c.Runsc)
		}
	case server.BackendKube:
	default:
		return fmt.Errorf("--runtime must be gvisor or kube, not %q", c.Backend)
	}
	if strings.ContainsAny(c.Frames, ";,\r\n") {
		return errors.New("--frame-ancestors is one CSP source list: no ';' or ','")
	}
	switch c.Runner {
	case "none":
		c.Runner = ""
	case "":
	default:
		if st, err := os.Stat(c.Runner); err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("runner not found at %s: run scripts/deps.sh, or pass --runner none", c.Runner)
		}
	}
	return nil
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if cfg.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	idle := cfg.IdleAfter
	if idle == 0 {
		idle = -1 // the flag's 0 means never; the server's zero means the default
	}
	app, err := server.New(ctx, server.Config{
		Data: cfg.Data, Images: cfg.Images, Runsc: cfg.Runsc, Platform: cfg.Platform, Ceiling: cfg.Ceiling,
		ReapEvery: cfg.ReapEvery, OperatorOrg: cfg.Operator, IdleAfter: idle, SweepGrace: cfg.Grace,
		Runner: cfg.Runner, FrameAncestors: cfg.Frames, Backend: cfg.Backend, Kube: cfg.Kube,
	}, log)
	if err != nil {
		return err
	}
	defer app.Close()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: app.Handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving", "addr", "http://"+ln.Addr().String(), "data", cfg.Data, "images", cfg.Images)
	fmt.Fprintf(stdout, "sandbox: listening on http://%s\n", ln.Addr())

	bgCtx, stopBackground := context.WithCancel(ctx)
	bgDone := make(chan struct{})
	go func() { defer close(bgDone); app.Run(bgCtx) }()
	defer func() { stopBackground(); <-bgDone }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Sandboxes outlive the server on purpose: a restart re-adopts them.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
