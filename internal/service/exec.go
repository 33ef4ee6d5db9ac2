package service

import (
	"context"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/redact"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// OutputCap bounds stdout and stderr of one exec, each.
const OutputCap = 1 << 20

// ExecRequest is the body of POST /v1/sandbox/{id}/exec, and of the typed
// op and MCP tool run (which embed it). An option added here reaches every
// door; the backends see it through runtime.ExecRequest.
type ExecRequest = wire.ExecRequest

// ExecResult is a finished program. A non-zero exit is a result, not an
// error.
type ExecResult = wire.ExecResult

// Exec runs a program in a running sandbox and waits for it. With nil
// writers its output is in the answer; else it goes, redacted, to stdout
// and stderr as the program writes it (a streamed answer). A write error
// (the client went away) ends the program the way a closed connection
// does.
func (s *Service) Exec(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (*ExecResult, error) {
	argv, err := ProgramArgv(req.Argv, req.Command)
	if err != nil {
		return nil, err
	}
	timeout, err := s.cfg.Timeouts().For(req.TimeoutSec)
	if err != nil {
		return nil, err
	}
	env, err := ValidEnv(req.Env)
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
	sb, work, done, err := s.use(ctx, id, true)
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
	outBuf, errBuf := capture.New(OutputCap), capture.New(OutputCap)
	var outW, errW io.Writer = outBuf, errBuf
	if stdout != nil {
		outW, errW = stdout, stderr
	}
	narr := s.narration(ctx, req.Session, req.Redact)
	if narr != nil {
		narr.Event("start", sb.ID+": "+CommandLine(argv))
		outW, errW = io.MultiWriter(outW, narr.Writer("stdout")), io.MultiWriter(errW, narr.Writer("stderr"))
	}
	rOut, rErr := redact.NewWriter(outW, req.Redact), redact.NewWriter(errW, req.Redact)
	o, err := s.run(ctx, work, sb, Command{
		ExecRequest: runtime.ExecRequest{Argv: argv, Env: env, Dir: dir, Stdin: strings.NewReader(req.Stdin), Stdout: rOut, Stderr: rErr},
		Timeout:     timeout, Metric: "exec", Code: true,
	})
	rOut.Close()
	rErr.Close()
	if err != nil {
		if narr != nil {
			narr.Event("error", sandbox.Message(err))
		}
		return nil, err
	}
	if note := o.Note(timeout); note != "" {
		errBuf.Note(note)
		if stderr != nil {
			io.WriteString(stderr, note)
		}
		if narr != nil {
			narr.Event("stderr", note)
		}
	}
	if narr != nil {
		narr.Event("exit", strconv.Itoa(o.Code))
	}
	return &ExecResult{ExitCode: o.Code, TimedOut: o.TimedOut, Stopped: o.Stopped, Woken: o.Woken,
		Stdout: outBuf.String(), Stderr: errBuf.String()}, nil
}

// narration returns the narration of a command for session, or nil when
// there is none to make.
func (s *Service) narration(ctx context.Context, session string, secrets []string) *narrate.Command {
	return narrate.ForCaller(ctx, s.d.Narrator, session, secrets, OutputCap)
}

// Timeouts are the bounds of a program's run, from the service's
// configuration (--exec-timeout, --max-exec-timeout): a plain value, so
// that every part that runs a caller's program (exec here, the
// interpreter) applies one rule. Zero fields mean DefaultExecTimeout and
// DefaultMaxExecTimeout.
type Timeouts struct {
	Default, Max time.Duration
}

// Timeouts are c's bounds of a run.
func (c Config) Timeouts() Timeouts {
	d := c.withDefaults()
	return Timeouts{Default: d.ExecTimeout, Max: d.MaxExecTimeout}
}

// For turns a caller's timeoutSec into a run's deadline: the server's
// default when zero, never past the server's maximum; negative is refused.
func (t Timeouts) For(sec int) (time.Duration, error) {
	if t.Default == 0 {
		t.Default = DefaultExecTimeout
	}
	if t.Max == 0 {
		t.Max = DefaultMaxExecTimeout
	}
	if sec < 0 {
		return 0, sandbox.Errorf(sandbox.KindInvalid, "timeoutSec must not be negative")
	}
	if sec == 0 {
		return min(t.Default, t.Max), nil
	}
	// Clamp before multiplying: a huge timeoutSec must not overflow.
	return time.Duration(min(int64(sec), int64(t.Max/time.Second))) * time.Second, nil
}

// ProgramArgv is what a request runs: argv as is, else the shell line
// command through sh -c; neither is refused.
func ProgramArgv(argv []string, command string) ([]string, error) {
	switch {
	case len(argv) > 0:
		return argv, NoNUL("argv", argv...)
	case command != "":
		return []string{"sh", "-c", command}, NoNUL("command", command)
	}
	return nil, sandbox.Errorf(sandbox.KindInvalid, "give argv (a list) or command (a shell line)")
}

// NoNUL refuses strings that cannot be a program's arguments.
func NoNUL(what string, list ...string) error {
	for _, a := range list {
		if strings.IndexByte(a, 0) >= 0 {
			return sandbox.Errorf(sandbox.KindInvalid, "%s contains a NUL byte", what)
		}
	}
	return nil
}

func validEnvKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// ValidEnv checks a request's environment and answers it as KEY=VALUE.
func ValidEnv(env map[string]string) ([]string, error) {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if !validEnvKey(k) {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "env key %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "env %s contains a NUL byte", k)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
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

// CommandLine is how a narration shows the command that starts.
func CommandLine(argv []string) string {
	if len(argv) == 3 && argv[0] == "sh" && argv[1] == "-c" {
		return argv[2]
	}
	return strings.Join(argv, " ")
}
