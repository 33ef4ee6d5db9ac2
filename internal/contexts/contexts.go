// Package contexts is the sandboxes' code contexts: Jupyter kernels that
// keep their variables, imports and working directory between runs, and
// answer rich results (a figure as PNG, a frame as HTML). A context lives in
// the sandbox's process daemon (cmd/sandbox-runner/contexts.go), which
// starts a driver on Debian's jupyter_client for it; this package reaches
// the daemon through the processes' seam (Daemon) and reads what it says as
// untrusted input: every event is checked and bounded before a caller sees
// it.
//
// A context is the sandbox's memory, not a record: it survives sleep and is
// carried by a fork where the backend keeps memory, and is gone where it
// does not (a Kubernetes wake); a stop ends it with every other process.
package contexts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/procwire"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
)

// Daemon is the sandbox's process daemon, as internal/processes reaches it.
type Daemon interface {
	Daemon(ctx context.Context, id string, req procwire.Request) (*procwire.Answer, error)
	DaemonStream(ctx context.Context, id string, req procwire.Request, limit time.Duration, out io.Writer) error
}

// Sandboxes finds a sandbox of the caller's org (its workdir).
type Sandboxes interface {
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
}

// Bounds: a run's default timeout, the most a JSON answer collects (a
// stream has no total bound), one event's size, and the grace past a run's
// timeout for its kernel to stop after the interrupt.
const (
	DefaultTimeout = 300 * time.Second
	MaxTimeout     = 24 * time.Hour
	maxCollected   = 64 << 20
	maxEvent       = 32 << 20
	interruptGrace = 30 * time.Second
)

// kernels maps the languages a context runs to what runs them: Jupyter
// kernelspecs (Debian's python3-ipykernel and r-cran-irkernel, in the exec
// image), and the runner's own drivers for JavaScript (node:vm) and bash
// (an interactive bash on a pty).
var kernels = map[string]string{"python": "python3", "r": "ir", "javascript": "node", "bash": "bash"}

var aliases = map[string]string{"py": "python", "python3": "python", "python": "python", "r": "r",
	"js": "javascript", "javascript": "javascript", "node": "javascript", "bash": "bash", "sh": "bash"}

// Language is the canonical name of a context language, or an error that
// names those there are.
func Language(l string) (string, error) {
	if c, ok := aliases[strings.ToLower(l)]; ok {
		return c, nil
	}
	return "", sandbox.Errorf(sandbox.KindInvalid, "language %q has no kernel here: contexts run python (py), r, javascript (js) and bash", l)
}

func languageOf(kernel string) string {
	for l, k := range kernels {
		if k == kernel {
			return l
		}
	}
	return kernel
}

// Contexts are the code contexts of one server's sandboxes.
type Contexts struct {
	d  Daemon
	sb Sandboxes
}

// New are the contexts reached through d.
func New(d Daemon, sb Sandboxes) *Contexts { return &Contexts{d: d, sb: sb} }

// Create opens a context in sandbox id: its kernel is started and ready
// when this answers.
func (c *Contexts) Create(ctx context.Context, id string, req wire.ContextRequest) (*wire.CodeContext, error) {
	b := make([]byte, 6)
	rand.Read(b)
	return c.create(ctx, id, "ctx_"+hex.EncodeToString(b), req)
}

func (c *Contexts) create(ctx context.Context, id, ctxID string, req wire.ContextRequest) (*wire.CodeContext, error) {
	lang, err := Language(req.Language)
	if err != nil {
		return nil, err
	}
	env, err := service.ValidEnv(req.Env)
	if err != nil {
		return nil, err
	}
	sb, err := c.sb.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	dir, err := sandbox.ResolvePath(sb.Workdir, req.Cwd)
	if err != nil {
		return nil, err
	}
	return c.one(ctx, id, procwire.Request{Op: "ctxnew", Ctx: ctxID, Kernel: kernels[lang], Dir: dir, Env: env})
}

// List answers sandbox id's contexts, oldest first.
func (c *Contexts) List(ctx context.Context, id string) ([]wire.CodeContext, error) {
	a, err := c.d.Daemon(ctx, id, procwire.Request{Op: "ctxlist"})
	if err != nil {
		return nil, refusal(a, "", err)
	}
	if len(a.Contexts) > 4096 {
		return nil, nonsense()
	}
	out := make([]wire.CodeContext, 0, len(a.Contexts))
	for _, k := range a.Contexts {
		if k != nil {
			out = append(out, view(k))
		}
	}
	return out, nil
}

// Delete ends a context: its kernel and everything it holds.
func (c *Contexts) Delete(ctx context.Context, id, ctxID string) (*wire.CodeContext, error) {
	return c.one(ctx, id, procwire.Request{Op: "ctxdel", Ctx: ctxID})
}

// Interrupt interrupts a context's run (the kernel's SIGINT, as Jupyter's
// own interrupt): the run ends with a KeyboardInterrupt, the context's
// state stays.
func (c *Contexts) Interrupt(ctx context.Context, id, ctxID string) (*wire.CodeContext, error) {
	return c.one(ctx, id, procwire.Request{Op: "ctxint", Ctx: ctxID})
}

// one asks the daemon of sandbox id for req, whose answer is one context.
func (c *Contexts) one(ctx context.Context, id string, req procwire.Request) (*wire.CodeContext, error) {
	a, err := c.d.Daemon(ctx, id, req)
	if err != nil {
		return nil, refusal(a, req.Ctx, err)
	}
	if a.Context == nil {
		return nil, nonsense()
	}
	v := view(a.Context)
	return &v, nil
}

// Run runs code in context ctxID of sandbox id. With emit, each event goes
// to it as it comes and the answer is nil; without, the run's events are
// collected into the answer (at most 64 MiB of them). A language's name as
// ctxID is its default context, made on first use.
func (c *Contexts) Run(ctx context.Context, id, ctxID string, req wire.ContextRunRequest, emit func(wire.ContextEvent) error) (*wire.Execution, error) {
	timeout := DefaultTimeout
	if req.TimeoutSec < 0 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "timeoutSec must not be negative")
	}
	if req.TimeoutSec > 0 {
		timeout = time.Duration(req.TimeoutSec) * time.Second
	}
	if timeout > MaxTimeout {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "timeoutSec is at most %d", int(MaxTimeout.Seconds()))
	}
	var ex *wire.Execution
	if emit == nil {
		ex = &wire.Execution{Results: []wire.Result{}, Logs: wire.Logs{Stdout: []string{}, Stderr: []string{}}}
		emit = collect(ex)
	}
	for attempt := 0; ; attempt++ {
		r := &reader{emit: emit}
		err := c.d.DaemonStream(ctx, id, procwire.Request{Op: "ctxrun", Ctx: ctxID, Code: req.Code, TimeoutSec: int(timeout.Seconds())},
			timeout+interruptGrace, r)
		if err == nil {
			err = r.finish()
		}
		if r.refused == "no such context" && attempt == 0 {
			if lang, lerr := Language(ctxID); lerr == nil && lang == ctxID {
				if _, err := c.create(ctx, id, ctxID, wire.ContextRequest{Language: lang}); err != nil && sandbox.KindOf(err) != sandbox.KindConflict {
					return nil, err
				}
				continue
			}
		}
		if r.refused != "" {
			return nil, refusal(&procwire.Answer{Error: r.refused}, ctxID, err)
		}
		if err != nil {
			return nil, err
		}
		return ex, nil
	}
}

// collect is the emit of a JSON answer.
func collect(ex *wire.Execution) func(wire.ContextEvent) error {
	size := 0
	return func(e wire.ContextEvent) error {
		switch e.Type {
		case "stdout":
			ex.Logs.Stdout = append(ex.Logs.Stdout, e.Text)
		case "stderr":
			ex.Logs.Stderr = append(ex.Logs.Stderr, e.Text)
		case "result":
			ex.Results = append(ex.Results, wire.Result{Data: e.Data, IsMainResult: e.IsMainResult})
		case "error":
			ex.Error = e.Error
		case "end":
			ex.ExecutionCount, ex.TimedOut = e.ExecutionCount, e.TimedOut
		}
		size += eventSize(e)
		if size > maxCollected {
			return sandbox.Errorf(sandbox.KindLimit, "the run's output passed %d MiB: ask for it as a stream (Accept: application/x-ndjson)", maxCollected>>20)
		}
		return nil
	}
}

// reader splits the daemon's stream into events, checks each and hands it
// on. The first line may be a refusal instead.
type reader struct {
	emit    func(wire.ContextEvent) error
	buf     []byte
	lines   int
	ended   bool
	refused string
}

func (r *reader) Write(p []byte) (int, error) {
	r.buf = append(r.buf, p...)
	for {
		i := bytes.IndexByte(r.buf, '\n')
		if i < 0 {
			break
		}
		line := r.buf[:i]
		r.buf = r.buf[i+1:]
		if err := r.line(line); err != nil {
			return 0, err
		}
	}
	if len(r.buf) > maxEvent {
		return 0, sandbox.Errorf(sandbox.KindBadGateway, "the context's kernel sent an event of more than %d MiB", maxEvent>>20)
	}
	return len(p), nil
}

func (r *reader) line(line []byte) error {
	r.lines++
	if r.ended {
		return nonsense()
	}
	var e procwire.Event
	if err := json.Unmarshal(line, &e); err != nil {
		return nonsense()
	}
	if r.lines == 1 && e.Error != "" && e.Type == "" {
		r.refused = e.Error
		return nil
	}
	ev, err := check(e)
	if err != nil {
		return err
	}
	if ev.Type == "end" {
		r.ended = true
	}
	return r.emit(ev)
}

func (r *reader) finish() error {
	if r.refused != "" {
		return nil
	}
	if !r.ended {
		return sandbox.Errorf(sandbox.KindBadGateway, "the context's run ended without its end")
	}
	return nil
}

// mimes are the result formats a caller gets; others are dropped.
var mimes = map[string]bool{"text/plain": true, "text/html": true, "text/markdown": true, "text/latex": true,
	"image/png": true, "image/jpeg": true, "image/svg+xml": true, "application/json": true, "application/javascript": true}

// check turns the driver's event into the caller's, refusing what an
// honest driver does not say.
func check(e procwire.Event) (wire.ContextEvent, error) {
	out := wire.ContextEvent{Type: e.Type}
	switch e.Type {
	case "stdout", "stderr":
		out.Text = e.Text
	case "result":
		out.IsMainResult = e.IsMain
		out.Data = map[string]any{}
		for k, raw := range e.Data {
			if !mimes[k] {
				continue
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return out, nonsense()
			}
			if _, isString := v.(string); !isString && k != "application/json" {
				if l, ok := v.([]any); ok { // Jupyter may split text into lines
					var sb strings.Builder
					for _, p := range l {
						s, _ := p.(string)
						sb.WriteString(s)
					}
					v = sb.String()
				} else {
					continue
				}
			}
			out.Data[k] = v
		}
	case "error":
		tb := e.Traceback
		if tb == nil {
			tb = []string{}
		}
		out.Error = &wire.ExecutionError{Name: e.Name, Value: e.Value, Traceback: tb}
	case "end":
		out.ExecutionCount, out.TimedOut = e.Count, e.TimedOut
	default:
		return out, nonsense()
	}
	return out, nil
}

func view(k *procwire.Context) wire.CodeContext {
	return wire.CodeContext{ID: k.ID, Language: languageOf(k.Kernel), Cwd: k.Dir, CreatedAt: k.Started / 1000, Busy: k.Busy}
}

func nonsense() error {
	return sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's process daemon answered nonsense about a context")
}

// refusal is the caller's error for the daemon's refusal in a (or err when
// the daemon did not refuse).
func refusal(a *procwire.Answer, ctxID string, err error) error {
	if a == nil || a.Error == "" {
		return err
	}
	msg := a.Error
	switch {
	case msg == "no such context":
		return sandbox.Errorf(sandbox.KindNotFound, "no context %q in this sandbox (a context ends with a stop, and with a wake that keeps no memory)", ctxID)
	case msg == "the context exists", msg == "the context is busy with another run":
		return sandbox.Errorf(sandbox.KindConflict, "context %q: %s", ctxID, strings.TrimPrefix(msg, "the context "))
	case strings.HasSuffix(msg, "that is the most one sandbox keeps"):
		return sandbox.Errorf(sandbox.KindLimit, "%s: delete one first", msg)
	case strings.Contains(msg, "code contexts run on the exec image"):
		return sandbox.Errorf(sandbox.KindInvalid, "%s", msg)
	case strings.HasPrefix(msg, "the kernel"):
		return sandbox.Errorf(sandbox.KindBadGateway, "%s", msg)
	}
	return sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's process daemon refused: %s", msg)
}

// eventSize is about what e holds in memory.
func eventSize(e wire.ContextEvent) int {
	n := len(e.Text)
	for k, v := range e.Data {
		n += len(k)
		if s, ok := v.(string); ok {
			n += len(s)
		} else {
			b, _ := json.Marshal(v)
			n += len(b)
		}
	}
	if e.Error != nil {
		n += len(e.Error.Name) + len(e.Error.Value)
		for _, t := range e.Error.Traceback {
			n += len(t)
		}
	}
	return n
}
