package interp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/files"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
)

// Sandboxes is what the interpreter needs of the service: its sandboxes are
// exec sandboxes, leased and ended like any other, and a run is one program
// through Run, the service's one exec primitive.
type Sandboxes interface {
	Lease(ctx context.Context, req service.LeaseRequest) (*sandbox.Sandbox, error)
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	End(ctx context.Context, id string, purge bool) (*service.EndResult, error)
	Write(ctx context.Context, id, path string, body io.Reader, size int64) (*files.WriteResult, error)
	Run(ctx context.Context, id string, cmd service.Command) (service.Outcome, error)
}

var _ Sandboxes = files.Joined{}

// Contexts run code in a sandbox's code contexts (internal/contexts).
type Contexts interface {
	Run(ctx context.Context, id, ctxID string, req wire.ContextRunRequest, emit func(wire.ContextEvent) error) (*wire.Execution, error)
}

// Interpreter runs programs of the 13 languages in exec sandboxes.
type Interpreter struct {
	sb       Sandboxes
	timeouts service.Timeouts
	runner   runtime.Runner
	contexts Contexts // nil: no run takes a context
	log      *slog.Logger
}

// WithContexts lets a run take a code context (Request.Context).
func (it *Interpreter) WithContexts(c Contexts) *Interpreter {
	it.contexts = c
	return it
}

// contextLanguages are the interpreter's languages a code context runs,
// by the context language they are.
var contextLanguages = map[string]string{"py": "python", "r": "r", "js": "javascript", "bash": "bash"}

// New returns the interpreter over sb; t bounds a run as it bounds an exec
// (the service's configuration). runner is the backend's in-sandbox
// runner (cmd/sandbox-runner), which runs a program in one process start;
// where the backend has none (nil), the same steps run as a shell script.
func New(sb Sandboxes, t service.Timeouts, runner runtime.Runner, log *slog.Logger) *Interpreter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Interpreter{sb: sb, timeouts: t, runner: runner, log: log}
}

// Request is the body of POST /v1/exec and of the MCP tool run_code.
// Everything that steers a run comes from here, never from the query.
type Request = wire.RunCodeRequest

// InputFile is a file placed in the workdir before the run: text in Data,
// or bytes in DataBase64.
type InputFile = wire.InputFile

// Result is a finished run. SandboxID is the sandbox that ran it: the
// caller's when it still ran, a new one otherwise (NewSandbox says so).
type Result = wire.RunCodeResult

// maxArgs bounds a run's argument list.
const maxArgs = 1024

func unknownLanguage(name string) error {
	return sandbox.Errorf(sandbox.KindInvalid, "unknown language %q: use one of %s", name, strings.Join(Names(), ", "))
}

// Run runs a program in the caller's sandbox (an earlier run's) or in a new one.
// Every input is checked before a sandbox is leased for it.
func (it *Interpreter) Run(ctx context.Context, req Request) (*Result, error) {
	lang, ok := Lookup(req.Language)
	if !ok {
		return nil, unknownLanguage(req.Language)
	}
	if strings.TrimSpace(req.Code) == "" {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "code is empty")
	}
	if len(req.Args) > maxArgs {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "at most %d args", maxArgs)
	}
	if err := service.NoNUL("args", req.Args...); err != nil {
		return nil, err
	}
	timeout, err := it.timeouts.For(req.TimeoutSec)
	if err != nil {
		return nil, err
	}
	if req.Context != "" {
		if it.contexts == nil {
			return nil, sandbox.Errorf(sandbox.KindUnsupported, "this server's backend has no code contexts")
		}
		if contextLanguages[lang.Name] == "" {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "a code context runs py, r, js or bash, not %s", lang.Name)
		}
		if len(req.Args) > 0 {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "a run in a code context takes no args")
		}
	}
	inputs, err := decodeInputs(req.Files)
	if err != nil {
		return nil, err
	}
	workdir := sandbox.MustClass(sandbox.ClassExec).Workdir
	for _, f := range inputs {
		if _, err := sandbox.ResolvePath(workdir, f.path); err != nil {
			return nil, err
		}
		if len(f.data) > files.MaxFileBytes {
			return nil, sandbox.Errorf(sandbox.KindTooLarge, "file %q is larger than %d bytes", f.path, files.MaxFileBytes)
		}
	}

	res := &Result{SandboxID: req.SandboxID}
	if !it.alive(ctx, req.SandboxID) {
		sb, err := it.sb.Lease(ctx, service.LeaseRequest{Class: sandbox.ClassExec, Image: req.Image})
		if err != nil {
			return nil, err
		}
		res.SandboxID, res.NewSandbox = sb.ID, true
	}
	out, err := it.run(ctx, lang, req, inputs, timeout, res)
	if err != nil && res.NewSandbox {
		// The caller never learns a sandbox that failed on its first run:
		// end it rather than leave it running on the caller's account.
		if _, eerr := it.sb.End(context.WithoutCancel(ctx), res.SandboxID, false); eerr != nil {
			it.log.Warn("ending an interpreter sandbox whose first run failed", "sandbox", res.SandboxID, "err", eerr)
		}
	}
	return out, err
}

// run writes the inputs and runs the program in sandbox res.SandboxID.
func (it *Interpreter) run(ctx context.Context, lang Lang, req Request, inputs []inputFile, timeout time.Duration, res *Result) (*Result, error) {
	for _, f := range inputs {
		if _, err := it.sb.Write(ctx, res.SandboxID, f.path, strings.NewReader(f.data), int64(len(f.data))); err != nil {
			return nil, err
		}
	}
	if req.Context != "" {
		return it.inContext(ctx, lang, req, timeout, res)
	}
	nonce, dir := Nonce(), RunDir()
	stdout, stderr := capture.New(service.OutputCap), capture.New(service.OutputCap)
	split := NewSplitter(stdout, nonce)
	cmd := service.Command{ExecRequest: runtime.ExecRequest{Stdout: split, Stderr: stderr}, Timeout: timeout, Metric: "interp_" + lang.Name, Code: true}
	switch {
	case lang.Inline != nil:
		cmd.Argv = lang.Inline
		cmd.Stdin = io.MultiReader(strings.NewReader(lang.InlineHeader(nonce, dir, req.Args)), strings.NewReader(req.Code))
	case it.runner != nil:
		spec, err := json.Marshal(lang.Spec(nonce, dir, req.Args))
		if err != nil {
			return nil, err
		}
		cmd.Argv = []string{it.runner.RunnerPath()}
		cmd.Stdin = io.MultiReader(bytes.NewReader(append(spec, '\n')), strings.NewReader(req.Code))
	default:
		cmd.Argv = append([]string{"sh", "-c", lang.Script(), dir}, req.Args...)
		cmd.Stdin = io.MultiReader(strings.NewReader(nonce+"\n"), strings.NewReader(req.Code))
	}
	o, err := it.sb.Run(ctx, res.SandboxID, cmd)
	if err != nil {
		return nil, err
	}
	res.ExitCode, res.TimedOut, res.Stopped = o.Code, o.TimedOut, o.Stopped
	if b, ok := split.Trailer(); ok {
		if t, ok := ParseTrailer(b); ok {
			res.ExitCode, res.Files = t.ExitCode, t.Files
		}
	} else {
		// Killed before it could say what changed: ask on its own.
		var err error
		if res.Files, err = it.listFiles(ctx, res.SandboxID, "d="+shellQuote(dir)+"\n"+ChangedScript); err != nil {
			it.log.Warn("listing the files of a killed run", "sandbox", res.SandboxID, "err", err)
		}
	}
	stderr.Note(o.Note(timeout))
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	if res.Files == nil {
		res.Files = []File{}
	}
	return res, nil
}

// alive reports whether id names a sandbox of the caller that still runs
// (or sleeps, and wakes on use). Anything else — malformed, ended, another
// org's, failed — is not a sandbox to reuse.
func (it *Interpreter) alive(ctx context.Context, id string) bool {
	if id == "" || !sandbox.ValidID(id) {
		return false
	}
	sb, err := it.sb.Get(ctx, id)
	return err == nil && (sb.Status == sandbox.StatusRunning || sb.Status == sandbox.StatusSleeping)
}

type inputFile struct{ path, data string }

func decodeInputs(files []InputFile) ([]inputFile, error) {
	if len(files) > 100 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "at most 100 files per run")
	}
	out := make([]inputFile, 0, len(files))
	for _, f := range files {
		if f.Path == "" {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "every file needs a path")
		}
		if f.Data != "" && f.DataBase64 != "" {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "file %q: give data or dataBase64, not both", f.Path)
		}
		data := f.Data
		if f.DataBase64 != "" {
			b, err := base64.StdEncoding.DecodeString(f.DataBase64)
			if err != nil {
				return nil, sandbox.Errorf(sandbox.KindInvalid, "file %q: dataBase64 is not standard base64", f.Path)
			}
			data = string(b)
		}
		out = append(out, inputFile{path: f.Path, data: data})
	}
	return out, nil
}

// Files lists the files of a sandbox's workdir (at most MaxFiles, sorted by
// path).
func (it *Interpreter) Files(ctx context.Context, id string) ([]File, error) {
	return it.listFiles(ctx, id, ListScript)
}

// listFiles runs a listing script in the sandbox's workdir and parses its
// answer. The listing's own exit code does not matter (head cuts find
// short); a listing that could not finish is an error.
func (it *Interpreter) listFiles(ctx context.Context, id, script string) ([]File, error) {
	out := capture.New(4 << 20)
	o, err := it.sb.Run(ctx, id, service.Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: out, Stderr: io.Discard},
		Timeout:     30 * time.Second,
	})
	if err == nil && (o.TimedOut || o.Stopped) {
		err = sandbox.Errorf(sandbox.KindBadGateway, "the file list could not be read")
	}
	if err != nil {
		return nil, err
	}
	files := ParseFiles(out.Bytes())
	if files == nil {
		files = []File{}
	}
	return files, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// inContext runs req.Code in a code context of sandbox res.SandboxID
// ("default": the language's default context) and answers it as a run:
// the output, then the last expression's value as text; an error's
// traceback on stderr and exit code 1; the rich results beside.
func (it *Interpreter) inContext(ctx context.Context, lang Lang, req Request, timeout time.Duration, res *Result) (*Result, error) {
	ctxID := req.Context
	if ctxID == "default" {
		ctxID = contextLanguages[lang.Name]
	}
	ex, err := it.contexts.Run(ctx, res.SandboxID, ctxID, wire.ContextRunRequest{Code: req.Code, TimeoutSec: int(timeout.Seconds())}, nil)
	if err != nil {
		return nil, err
	}
	stdout := strings.Join(ex.Logs.Stdout, "")
	for _, r := range ex.Results {
		if t, ok := r.Data["text/plain"].(string); ok && r.IsMainResult {
			stdout += t + "\n"
		}
	}
	stderr := strings.Join(ex.Logs.Stderr, "")
	if ex.Error != nil {
		res.ExitCode = 1
		stderr += strings.Join(ex.Error.Traceback, "\n")
		if len(ex.Error.Traceback) == 0 {
			stderr += ex.Error.Name + ": " + ex.Error.Value
		}
		stderr += "\n"
	}
	res.Stdout, res.Stderr, res.TimedOut, res.Results, res.Files = stdout, stderr, ex.TimedOut, ex.Results, []File{}
	if ex.TimedOut {
		res.ExitCode = 124
	}
	return res, nil
}
