package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Command is one program for Run: what the runtime runs, and the service's
// bounds on it.
type Command struct {
	runtime.ExecRequest
	// Timeout kills the program after this long (Outcome.TimedOut); zero
	// means no deadline but the caller's context (a connection).
	Timeout time.Duration
	// Metric labels the command latency metric; empty records none.
	Metric string
	// KeepAlive marks a connection (a terminal, a screen): while it runs
	// the sandbox is used and its lease is extended, never past the
	// ceiling.
	KeepAlive bool
	// Exec, when set, runs the program instead of a new exec of the
	// runtime (a stream of the sandbox's relay to its process daemon);
	// its end is classified the same way.
	Exec func(ctx context.Context, name string, req runtime.ExecRequest) error
	// Code marks the caller's own program (a command, a terminal, the
	// interpreter's run), which may call this server from inside: while
	// it runs, a sandbox with a lease credential keeps its API socket
	// (Deps.Relays).
	Code bool
}

// Outcome is how a program that ran ended. A broken channel, a sandbox
// that is not running, or a caller that went away is an error instead.
type Outcome struct {
	// Code is the exit code: the program's, 137 when Stopped, 124 when
	// TimedOut.
	Code     int
	Stopped  bool // cancelled by a stop call
	TimedOut bool // killed at Command.Timeout
	// Woken says the call woke the sandbox from sleep.
	Woken bool
}

// Note is the service's line for a program's stderr, if its end needs one.
func (o Outcome) Note(timeout time.Duration) string {
	switch {
	case o.Stopped:
		return "\n[sandbox: stopped]\n"
	case o.TimedOut:
		return fmt.Sprintf("\n[sandbox: killed after the %s timeout]\n", timeout)
	}
	return ""
}

// Run runs one program in sandbox id of the caller's org: the sandbox is
// woken if it sleeps, the program is work that Stop cancels and that keeps
// the sandbox from sleeping, and its end is classified (Outcome). Dir empty
// means the sandbox's workdir. This is the one exec primitive the terminal
// and the interpreter are built on.
func (s *Service) Run(ctx context.Context, id string, cmd Command) (Outcome, error) {
	sb, work, done, err := s.use(ctx, id, true)
	if err != nil {
		return Outcome{}, err
	}
	defer done()
	return s.run(ctx, work, sb, cmd)
}

// RunIn runs cmd in sb, a sandbox in use (Use's work context): the seam
// the service's neighbours (internal/files, …) run their programs through,
// several in one use where they need to.
func (s *Service) RunIn(ctx, work context.Context, sb *sandbox.Sandbox, cmd Command) (Outcome, error) {
	return s.run(ctx, work, sb, cmd)
}

// run executes cmd in sb (already in use by the caller; work from use, or
// a context derived from it that the caller may cancel) and classifies its
// end, for every door: exec, files, terminal, screen and interpreter.
//
//   - exited (any code) → Outcome.Code
//   - cancelled by Stop → Stopped, 137
//   - past cmd.Timeout → TimedOut, 124
//   - the caller went away → ctx's error
//   - work cancelled by its owner → that cause
//   - anything else: the channel broke → died (502, and the sandbox sleeps
//     if its container is gone)
func (s *Service) run(ctx, work context.Context, sb *sandbox.Sandbox, cmd Command) (Outcome, error) {
	if cmd.Dir == "" {
		cmd.Dir = sb.Workdir
	}
	runCtx, cancel := work, context.CancelFunc(func() {})
	if cmd.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(work, cmd.Timeout)
	}
	defer cancel()
	if cmd.KeepAlive {
		stop := make(chan struct{})
		defer close(stop)
		go s.keepAlive(context.WithoutCancel(ctx), sb, stop)
	}
	if cmd.Code {
		defer s.d.Credentials.HoldRelay(runCtx, sb)()
	}
	start := time.Now()
	exec := s.d.Runtime.Exec
	if cmd.Exec != nil {
		exec = cmd.Exec
	}
	err := exec(runCtx, sb.Name, cmd.ExecRequest)
	if cmd.Metric != "" {
		s.d.Metrics.Exec(cmd.Metric, time.Since(start))
	}
	s.touch(ctx, sb)
	out := Outcome{Woken: sb.Woken}
	var exit *runtime.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		out.Code = exit.Code
	case errors.Is(context.Cause(work), errStopped):
		out.Code, out.Stopped = 137, true
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && work.Err() == nil && ctx.Err() == nil:
		out.Code, out.TimedOut = 124, true
	case ctx.Err() != nil:
		return Outcome{}, ctx.Err()
	case work.Err() != nil:
		return Outcome{}, context.Cause(work)
	default:
		s.log.Error("exec channel broke", "sandbox", sb.ID, "err", err)
		return Outcome{}, s.died(ctx, sb, err)
	}
	return out, nil
}

// keepAlive is how often a connected terminal or screen marks its sandbox
// used and pushes its lease out, and by how much.
const (
	keepAliveEvery = 30 * time.Second
	keepAliveTTL   = 10 * time.Minute
)

// keepAlive marks sb used and extends its lease (never past the ceiling)
// until stop closes.
func (s *Service) keepAlive(ctx context.Context, sb *sandbox.Sandbox, stop <-chan struct{}) {
	class, err := sandbox.LookupClass(sb.Class)
	if err != nil {
		return
	}
	extend := func() {
		s.touch(ctx, sb)
		exp := sandbox.ExpiryFor(class, int64(keepAliveTTL/time.Second), s.now(), sb.CreatedAt, s.cfg.Ceiling)
		cur, err := s.d.Store.Get(ctx, sb.ID)
		if err != nil || !exp.After(cur.ExpiresAt) {
			return
		}
		if err := s.d.Store.SetExpiry(ctx, sb.ID, exp); err != nil {
			s.log.Warn("extending the lease of a connected sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	extend()
	t := time.NewTicker(keepAliveEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			extend()
		}
	}
}
