package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// OutputCap bounds stdout and stderr of one exec, each.
const OutputCap = 1 << 20

// ExecRequest is the body of POST /v1/sandbox/{id}/exec.
type ExecRequest struct {
	Argv       []string          `json:"argv,omitempty"`
	Command    string            `json:"command,omitempty"`
	Stdin      string            `json:"stdin,omitempty"`
	Dir        string            `json:"dir,omitempty"`
	TimeoutSec int               `json:"timeoutSec,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
}

// ExecResult is a finished program. A non-zero exit is a result, not an
// error.
type ExecResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Stopped  bool   `json:"stopped,omitempty"` // cancelled by POST .../stop
	Woken    bool   `json:"woken,omitempty"`   // the call woke the sandbox from sleep
}

// Exec runs a program in a running sandbox and waits for it.
func (s *Service) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	argv := req.Argv
	switch {
	case len(argv) > 0:
		for _, a := range argv {
			if strings.IndexByte(a, 0) >= 0 {
				return nil, sandbox.Errorf(sandbox.KindInvalid, "argv contains a NUL byte")
			}
		}
	case req.Command != "":
		if strings.IndexByte(req.Command, 0) >= 0 {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "command contains a NUL byte")
		}
		argv = []string{"sh", "-c", req.Command}
	default:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "give argv (a list) or command (a shell line)")
	}
	if req.TimeoutSec < 0 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "timeoutSec must not be negative")
	}
	env, err := validEnv(req.Env)
	if err != nil {
		return nil, err
	}
	timeout := s.cfg.ExecTimeout
	if req.TimeoutSec > 0 {
		// Clamp before multiplying: a huge timeoutSec must not overflow.
		timeout = time.Duration(min(int64(req.TimeoutSec), int64(s.cfg.MaxExecTimeout/time.Second))) * time.Second
	}
	timeout = min(timeout, s.cfg.MaxExecTimeout)
	sb, workCtx, done, err := s.use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	dir, err := sandbox.ResolvePath(sb.Workdir, req.Dir)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithTimeout(workCtx, timeout)
	defer cancel()
	stdout, stderr := &capped{max: OutputCap}, &capped{max: OutputCap}
	start := time.Now()
	defer func() { s.cfg.Metrics.Exec("exec", time.Since(start)) }()
	err = s.rt.Exec(runCtx, sb.Name, runtime.ExecRequest{
		Argv: argv, Env: env, Dir: dir, Stdin: strings.NewReader(req.Stdin), Stdout: stdout, Stderr: stderr,
	})
	s.touch(ctx, sb)
	res := &ExecResult{Woken: sb.Woken}
	var exit *runtime.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.ExitCode = exit.Code
	case errors.Is(context.Cause(workCtx), errStopped):
		res.ExitCode, res.Stopped = 137, true
		stderr.WriteString("\n[sandbox: stopped]\n")
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		res.ExitCode, res.TimedOut = 124, true
		stderr.WriteString(fmt.Sprintf("\n[sandbox: killed after the %s timeout]\n", timeout))
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		s.log.Error("exec channel broke", "sandbox", sb.ID, "err", err)
		return nil, s.died(ctx, sb, err)
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	return res, nil
}

// capped keeps the first max bytes written and counts the rest, so a
// program's flood neither grows memory nor blocks the program.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) <= room {
			c.buf.Write(p)
			return len(p), nil
		}
		c.buf.Write(p[:room])
		c.dropped += int64(len(p) - room)
		return len(p), nil
	}
	c.dropped += int64(len(p))
	return len(p), nil
}

func (c *capped) WriteString(s string) { c.buf.WriteString(s) }

func (c *capped) String() string {
	if c.dropped > 0 {
		return c.buf.String() + fmt.Sprintf("\n[sandbox: output truncated, %d more bytes dropped]\n", c.dropped)
	}
	return c.buf.String()
}

var _ io.Writer = (*capped)(nil)
