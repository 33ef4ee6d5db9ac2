package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox/internal/server"
)

// serveConfig is `sandbox serve`'s configuration: the server's (which
// composes each part's) and the listener's.
type serveConfig struct {
	server.Config
	Listen string
	Debug  bool
	// Grace is how long calls in flight may take to finish after
	// SIGTERM before their connections are cut.
	Grace time.Duration
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "address to serve HTTP on")
	fs.BoolVar(&c.Debug, "debug", false, "log every request")
	fs.DurationVar(&c.Grace, "shutdown-grace", 25*time.Second, "on SIGTERM, how long calls in flight may take to finish (event streams and consoles end at once, told to reconnect); under Kubernetes' terminationGracePeriodSeconds")
	c.Config.RegisterFlags(fs)
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q (flags come before them: sandbox serve -h)", fs.Args())
	}
	if cfg.Grace < 0 {
		return fmt.Errorf("--shutdown-grace %v: give 0 or more", cfg.Grace)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if cfg.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The listener comes first: the issuer's URL (its tokens' iss) is its
	// address, a port of 0 included.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	if cfg.Identity.URL == "" {
		cfg.Identity.URL = issuerURL(ln.Addr().String())
	}
	app, err := server.New(ctx, cfg.Config, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer app.Close()
	// Headers within --stall-timeout; a body must keep coming and an answer
	// must keep being taken (the api pushes those deadlines per read and
	// write); an idle keep-alive connection goes after 2 min. No whole-
	// request timeouts: exec answers, event streams and consoles are long
	// by design.
	srv := &http.Server{Handler: app.Handler, ReadHeaderTimeout: cfg.API.StallTimeout(), IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving", "addr", "http://"+ln.Addr().String(), "data", cfg.Data, "runtime", cfg.Backend)
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
	// Not ready, streams and consoles ended with a reason to reconnect,
	// no new connection taken, the calls in flight given the grace.
	log.Info("shutting down", "grace", cfg.Grace)
	start := time.Now()
	app.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.Grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("calls still in flight at the grace's end were cut", "grace", cfg.Grace)
		srv.Close()
	}
	log.Info("drained", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// issuerURL is the issuer URL --listen implies: its tokens' iss and its
// discovery's base. An unspecified host (":8080", "0.0.0.0:8080") is named
// localhost; behind a proxy or on another name, set --issuer-url.
func issuerURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}
