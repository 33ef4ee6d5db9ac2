package service

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// CodeRequest is the body of POST /v1/exec. Everything that steers a run
// comes from here, never from the query.
type CodeRequest struct {
	Language   string      `json:"language"`
	Code       string      `json:"code"`
	SessionID  string      `json:"session_id,omitempty"`
	Args       []string    `json:"args,omitempty"`
	Files      []InputFile `json:"files,omitempty"`
	TimeoutSec int         `json:"timeoutSec,omitempty"`
}

// InputFile is a file placed in the workdir before the run: text in Data,
// or bytes in DataBase64.
type InputFile struct {
	Path       string `json:"path"`
	Data       string `json:"data,omitempty"`
	DataBase64 string `json:"dataBase64,omitempty"`
}

// CodeResult is a finished run. SessionID is the sandbox that ran it: the
// caller's when it still ran, a new one otherwise (NewSession says so).
type CodeResult struct {
	SessionID  string        `json:"session_id"`
	NewSession bool          `json:"newSession,omitempty"`
	ExitCode   int           `json:"exitCode"`
	Stdout     string        `json:"stdout"`
	Stderr     string        `json:"stderr"`
	Files      []interp.File `json:"files"`
	TimedOut   bool          `json:"timedOut,omitempty"`
	Stopped    bool          `json:"stopped,omitempty"`
}

// maxArgs bounds a run's argument list.
const maxArgs = 1024

func unknownLanguage(name string) error {
	return sandbox.Errorf(sandbox.KindInvalid, "unknown language %q: use one of %s", name, strings.Join(interp.Names(), ", "))
}

// RunCode runs a program in a language of the interpreter, in the caller's
// session (a sandbox) or in a new one.
func (s *Service) RunCode(ctx context.Context, req CodeRequest) (*CodeResult, error) {
	lang, ok := interp.Lookup(req.Language)
	if !ok {
		return nil, unknownLanguage(req.Language)
	}
	if strings.TrimSpace(req.Code) == "" {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "code is empty")
	}
	if len(req.Args) > maxArgs {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "at most %d args", maxArgs)
	}
	if err := noNUL("args", req.Args...); err != nil {
		return nil, err
	}
	timeout, err := s.timeout(req.TimeoutSec)
	if err != nil {
		return nil, err
	}
	inputs, err := decodeInputs(req.Files)
	if err != nil {
		return nil, err
	}

	// Every input is checked before a sandbox is leased for it.
	workdir := sandbox.MustClass(sandbox.ClassExec).Workdir
	for _, f := range inputs {
		if _, err := sandbox.ResolvePath(workdir, f.path); err != nil {
			return nil, err
		}
		if len(f.data) > MaxFileBytes {
			return nil, sandbox.Errorf(sandbox.KindTooLarge, "file %q is larger than %d bytes", f.path, MaxFileBytes)
		}
	}

	res := &CodeResult{SessionID: req.SessionID}
	if !s.alive(ctx, req.SessionID) {
		sb, err := s.Lease(ctx, LeaseRequest{Class: sandbox.ClassExec})
		if err != nil {
			return nil, err
		}
		res.SessionID, res.NewSession = sb.ID, true
	}
	out, err := s.runCode(ctx, lang, req, inputs, timeout, res)
	if err != nil && res.NewSession {
		// The caller never learns a session that failed on its first run:
		// end it rather than leave it running on the caller's account.
		if _, eerr := s.End(context.WithoutCancel(ctx), res.SessionID, false); eerr != nil {
			s.log.Warn("ending a session whose first run failed", "sandbox", res.SessionID, "err", eerr)
		}
	}
	return out, err
}

// runCode writes the inputs and runs the program in session res.SessionID.
func (s *Service) runCode(ctx context.Context, lang interp.Lang, req CodeRequest, inputs []inputFile, timeout time.Duration, res *CodeResult) (*CodeResult, error) {
	for _, f := range inputs {
		if _, err := s.Write(ctx, res.SessionID, f.path, strings.NewReader(f.data)); err != nil {
			return nil, err
		}
	}

	sb, workCtx, done, err := s.use(ctx, res.SessionID)
	if err != nil {
		return nil, err
	}
	defer done()
	nonce, dir := interp.Nonce(), interp.RunDir()
	stdout, stderr := &capped{max: OutputCap}, &capped{max: OutputCap}
	split := interp.NewSplitter(stdout, nonce)
	req2 := runtime.ExecRequest{Dir: sb.Workdir, Stdout: split, Stderr: stderr}
	switch {
	case lang.Inline != nil:
		req2.Argv = lang.Inline
		req2.Stdin = io.MultiReader(strings.NewReader(lang.InlineHeader(nonce, dir, req.Args)), strings.NewReader(req.Code))
	case s.cfg.Runner != "":
		spec, err := json.Marshal(lang.Spec(nonce, dir, req.Args))
		if err != nil {
			return nil, err
		}
		req2.Argv = []string{s.cfg.Runner}
		req2.Stdin = io.MultiReader(bytes.NewReader(append(spec, '\n')), strings.NewReader(req.Code))
	default:
		req2.Argv = append([]string{"sh", "-c", lang.Script(), dir}, req.Args...)
		req2.Stdin = io.MultiReader(strings.NewReader(nonce+"\n"), strings.NewReader(req.Code))
	}
	run, note, err := s.run(ctx, workCtx, sb, req2, timeout, "interp_"+lang.Name)
	if err != nil {
		return nil, err
	}
	res.ExitCode, res.TimedOut, res.Stopped = run.ExitCode, run.TimedOut, run.Stopped
	if b, ok := split.Trailer(); ok {
		if t, ok := interp.ParseTrailer(b); ok {
			res.ExitCode, res.Files = t.ExitCode, t.Files
		}
	} else {
		// Killed before it could say what changed: ask on its own.
		res.Files = s.listFiles(ctx, sb, "d="+shellQuote(dir)+"\n"+interp.ChangedScript)
	}
	stderr.WriteString(note)
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	if res.Files == nil {
		res.Files = []interp.File{}
	}
	return res, nil
}

// alive reports whether id names a sandbox of the caller that still runs
// (or sleeps, and wakes on use). Anything else — malformed, ended, another
// org's, failed — is not a session to reuse.
func (s *Service) alive(ctx context.Context, id string) bool {
	if id == "" || !sandbox.ValidID(id) {
		return false
	}
	sb, err := s.store.Get(ctx, id)
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

// SessionFiles lists the files of a session's workdir (at most
// interp.MaxFiles, sorted by path).
func (s *Service) SessionFiles(ctx context.Context, id string) ([]interp.File, error) {
	sb, _, done, err := s.use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	files := s.listFiles(ctx, sb, interp.ListScript)
	if files == nil {
		return nil, sandbox.Errorf(sandbox.KindBadGateway, "the file list could not be read")
	}
	return files, nil
}

// listFiles runs a listing script in the workdir and parses its answer; nil
// when the listing itself failed.
func (s *Service) listFiles(ctx context.Context, sb *sandbox.Sandbox, script string) []interp.File {
	if ctx.Err() != nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out := &capped{max: 4 << 20}
	err := s.rt.Exec(lctx, sb.Name, runtime.ExecRequest{
		Argv: []string{"sh", "-c", script}, Dir: sb.Workdir, Stdout: out, Stderr: io.Discard,
	})
	var exit *runtime.ExitError
	if err != nil && !errors.As(err, &exit) {
		s.log.Warn("listing files", "sandbox", sb.ID, "err", err)
		return nil
	}
	files := interp.ParseFiles(out.buf.Bytes())
	if files == nil {
		files = []interp.File{}
	}
	return files
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
