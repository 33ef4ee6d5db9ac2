package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/redact"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// OutputCap bounds stdout and stderr of one exec, each.
const OutputCap = 1 << 20

// ExecRequest is the body of POST /v1/sandbox/{id}/exec and of the typed
// op run.
type ExecRequest struct {
	Argv       []string          `json:"argv,omitempty"`
	Command    string            `json:"command,omitempty"`
	Stdin      string            `json:"stdin,omitempty"`
	Dir        string            `json:"dir,omitempty"`
	TimeoutSec int               `json:"timeoutSec,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	// Session names a live log of the caller's org that the output is
	// appended to as it is produced (narration).
	Session string `json:"session,omitempty"`
	// Redact lists secrets replaced by "[redacted]" in the narration and in
	// the answer.
	Redact []string `json:"redact,omitempty"`
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
		if err := noNUL("argv", argv...); err != nil {
			return nil, err
		}
	case req.Command != "":
		if err := noNUL("command", req.Command); err != nil {
			return nil, err
		}
		argv = []string{"sh", "-c", req.Command}
	default:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "give argv (a list) or command (a shell line)")
	}
	timeout, err := s.timeout(req.TimeoutSec)
	if err != nil {
		return nil, err
	}
	env, err := validEnv(req.Env)
	if err != nil {
		return nil, err
	}
	if req.Session != "" {
		if err := sandbox.CheckSessionName("session", req.Session); err != nil {
			return nil, err
		}
	}
	if err := validRedact(req.Redact); err != nil {
		return nil, err
	}
	sb, workCtx, done, err := s.use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	dir, err := sandbox.ResolvePath(sb.Workdir, req.Dir)
	if err != nil {
		return nil, err
	}

	// runtime → redactor → (answer buffer, narration). The narration writer
	// drops rather than waits, so a slow log never slows the program.
	stdout, stderr := &capped{max: OutputCap}, &capped{max: OutputCap}
	var outW, errW io.Writer = stdout, stderr
	narr := s.narration(ctx, req.Session, req.Redact)
	if narr != nil {
		narr.event("start", sb.ID+": "+commandLine(argv))
		outW, errW = io.MultiWriter(stdout, narr.writer("stdout")), io.MultiWriter(stderr, narr.writer("stderr"))
	}
	rOut, rErr := redact.NewWriter(outW, req.Redact), redact.NewWriter(errW, req.Redact)
	res, note, err := s.run(ctx, workCtx, sb, runtime.ExecRequest{
		Argv: argv, Env: env, Dir: dir, Stdin: strings.NewReader(req.Stdin), Stdout: rOut, Stderr: rErr,
	}, timeout, "exec")
	rOut.Close()
	rErr.Close()
	if err != nil {
		if narr != nil {
			narr.event("error", sandbox.Message(err))
		}
		return nil, err
	}
	if note != "" {
		stderr.WriteString(note)
		if narr != nil {
			narr.event("stderr", note)
		}
	}
	if narr != nil {
		narr.event("exit", strconv.Itoa(res.ExitCode))
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	return res, nil
}

// timeout turns a caller's timeoutSec into the run's deadline: the server's
// default when zero, never past the server's maximum.
func (s *Service) timeout(sec int) (time.Duration, error) {
	if sec < 0 {
		return 0, sandbox.Errorf(sandbox.KindInvalid, "timeoutSec must not be negative")
	}
	if sec == 0 {
		return min(s.cfg.ExecTimeout, s.cfg.MaxExecTimeout), nil
	}
	// Clamp before multiplying: a huge timeoutSec must not overflow.
	return time.Duration(min(int64(sec), int64(s.cfg.MaxExecTimeout/time.Second))) * time.Second, nil
}

// run executes req in sb (already in use by the caller, workCtx from use)
// and sorts the outcome: an exit code, a timeout (124) or a stop (137) is a
// result; a broken channel is an error (the sandbox died). note is the
// service's own line for stderr, if any.
func (s *Service) run(ctx, workCtx context.Context, sb *sandbox.Sandbox, req runtime.ExecRequest, timeout time.Duration, metric string) (res *ExecResult, note string, err error) {
	runCtx, cancel := context.WithTimeout(workCtx, timeout)
	defer cancel()
	start := time.Now()
	err = s.rt.Exec(runCtx, sb.Name, req)
	s.cfg.Metrics.Exec(metric, time.Since(start))
	s.touch(ctx, sb)
	res = &ExecResult{Woken: sb.Woken}
	var exit *runtime.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.ExitCode = exit.Code
	case errors.Is(context.Cause(workCtx), errStopped):
		res.ExitCode, res.Stopped = 137, true
		note = "\n[sandbox: stopped]\n"
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		res.ExitCode, res.TimedOut = 124, true
		note = fmt.Sprintf("\n[sandbox: killed after the %s timeout]\n", timeout)
	case ctx.Err() != nil:
		return nil, "", ctx.Err()
	default:
		s.log.Error("exec channel broke", "sandbox", sb.ID, "err", err)
		return nil, "", s.died(ctx, sb, err)
	}
	return res, note, nil
}

// noNUL refuses strings that cannot be a program's arguments.
func noNUL(what string, list ...string) error {
	for _, a := range list {
		if strings.IndexByte(a, 0) >= 0 {
			return sandbox.Errorf(sandbox.KindInvalid, "%s contains a NUL byte", what)
		}
	}
	return nil
}

// validRedact bounds the secrets a caller asks to redact.
func validRedact(secrets []string) error {
	if len(secrets) > redact.MaxSecrets {
		return sandbox.Errorf(sandbox.KindInvalid, "redact takes at most %d secrets", redact.MaxSecrets)
	}
	total := 0
	for _, s := range secrets {
		if len(s) > redact.MaxSecretLen {
			return sandbox.Errorf(sandbox.KindInvalid, "a secret to redact is longer than %d bytes", redact.MaxSecretLen)
		}
		total += len(s)
	}
	// The redactor's work per output byte grows with the secrets' bytes.
	if total > 16<<10 {
		return sandbox.Errorf(sandbox.KindInvalid, "the secrets to redact add up to more than %d bytes", 16<<10)
	}
	return nil
}

// commandLine is how a narration shows the command that starts.
func commandLine(argv []string) string {
	if len(argv) == 3 && argv[0] == "sh" && argv[1] == "-c" {
		return argv[2]
	}
	return strings.Join(argv, " ")
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
