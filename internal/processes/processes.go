package processes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/internal/procwire"
	"github.com/sandboxd/sandbox/internal/relay"
	"github.com/sandboxd/sandbox/internal/relay/pool"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Background processes. The sandbox's init (cmd/sandbox-runner init) owns
// them: it starts each as its own child, keeps its output in a ring of
// ProcessRingBytes, feeds its stdin and records its end. The server reaches
// it over the exec channel (`sandbox-runner proc`) and keeps a durable copy
// of each record in the org's store, so a record outlives the init (a
// sandbox that died) and a server restart. Because init's children are in
// the checkpoint, a sleeping or forked sandbox keeps them running.

// ProcessRingBytes is the output kept per process (stdout and stderr
// together); older output is dropped and the stream says how much.
const ProcessRingBytes = 1 << 20

// Store is the part of the store the processes need.
type Store interface {
	PutProcess(ctx context.Context, p store.Process) error
	Processes(ctx context.Context, id string) ([]store.Process, error)
}

// ProcessRequest is the body of POST /v1/sandbox/{id}/processes, and of
// the typed op and MCP tool process_start.
type ProcessRequest = wire.ProcessRequest

// Process is a background process as every door shows it.
type Process = wire.Process

// Process statuses.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
	ProcessLost    = "lost"
)

// The daemon's wire types (internal/procwire, which the runner uses too).
type (
	procRequest = procwire.Request
	procRecord  = procwire.Record
	procAnswer  = procwire.Answer
)

// maxProcAnswer bounds what the daemon (code inside the sandbox: hostile)
// may answer to one request.
const maxProcAnswer = 16 << 20

// maxDaemonRecords is the most processes an honest daemon lists: its
// running ones (store.MaxProcessRecords, cmd/sandbox-runner's maxRunning)
// and the finished ones it keeps (its maxFinished). A longer list is
// nonsense, refused before it is written anywhere.
const maxDaemonRecords = store.MaxProcessRecords + 128

func (s *Processes) processes() (Store, error) {
	if s.runner == nil {
		return nil, runtime.Unsupported(s.backend, runtime.CapRunner)
	}
	return s.st, nil
}

// daemonError turns the daemon's refusal into the caller's error.
func daemonError(pid int, msg string) error {
	switch msg {
	case "no such process":
		return sandbox.Errorf(sandbox.KindNotFound, "no process %d in this sandbox", pid)
	case "the process has ended", "the process's stdin is closed", "the process has no terminal":
		return sandbox.Errorf(sandbox.KindConflict, "process %d: %s", pid, msg)
	}
	if strings.HasSuffix(msg, "processes are running; that is the most one sandbox keeps") {
		return sandbox.Errorf(sandbox.KindLimit, "%s", msg)
	}
	return sandbox.Errorf(sandbox.KindInvalid, "%s", msg)
}

// call sends req (and data, for stdin) to sb's daemon and writes its answer
// to out. run is how the program runs: s.run for a caller's work, the
// runtime directly where the sandbox's lock is held.
func (s *Processes) call(ctx context.Context, exec func(runtime.ExecRequest) (service.Outcome, error), req procRequest, data io.Reader, out io.Writer) error {
	line, _ := json.Marshal(req)
	if len(line) >= procwire.MaxRequest {
		return sandbox.Errorf(sandbox.KindInvalid, "the call is %d bytes as the sandbox's process daemon reads it (its code, command, environment or stdin as JSON); the most is %d", len(line), procwire.MaxRequest-1)
	}
	in := io.Reader(bytes.NewReader(append(line, '\n')))
	if data != nil {
		in = io.MultiReader(in, data)
	}
	errBuf := capture.New(4 << 10)
	o, err := exec(runtime.ExecRequest{Argv: []string{s.runner.RunnerPath(), "proc"}, Dir: "/", Stdin: in, Stdout: out, Stderr: errBuf})
	if err != nil {
		return err
	}
	switch o.Code {
	case 0:
		return nil
	case 3:
		return sandbox.Errorf(sandbox.KindConflict, "this sandbox was started before background processes existed (its init keeps none): lease a new one")
	}
	return sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's process daemon failed (exit %d): %s", o.Code, strings.TrimSpace(errBuf.String()))
}

// ask is call for a one-answer request of a caller's work.
func (s *Processes) ask(ctx, work context.Context, sb *sandbox.Sandbox, req procRequest, data io.Reader) (*procAnswer, error) {
	return s.askWith(ctx, func(r runtime.ExecRequest) (service.Outcome, error) {
		return s.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: r, Metric: "process", Exec: s.viaRelay(sb, data != nil)})
	}, req, data)
}

func (s *Processes) askWith(ctx context.Context, exec func(runtime.ExecRequest) (service.Outcome, error), req procRequest, data io.Reader) (*procAnswer, error) {
	out := capture.New(maxProcAnswer)
	if err := s.call(ctx, exec, req, data, out); err != nil {
		return nil, err
	}
	var a procAnswer
	if err := json.Unmarshal([]byte(out.String()), &a); err != nil || a.Boot == "" || len(a.Processes) > maxDaemonRecords {
		return nil, sandbox.Wrap(sandbox.KindBadGateway, err, "the sandbox's process daemon answered nonsense")
	}
	if a.Error != "" {
		return &a, daemonError(req.Pid, a.Error)
	}
	return &a, nil
}

// StartProcess starts a background process in sandbox id.
func (s *Processes) StartProcess(ctx context.Context, id string, req ProcessRequest) (*Process, error) {
	return s.StartIn(ctx, id, req, "")
}

// startProcess is StartProcess; a non-empty imageDir is the working
// directory an image's config names, taken as is (it is the image's, not
// the caller's, and may be outside the workdir).
func (s *Processes) StartIn(ctx context.Context, id string, req ProcessRequest, imageDir string) (*Process, error) {
	ps, err := s.processes()
	if err != nil {
		return nil, err
	}
	argv, err := service.ProgramArgv(req.Argv, req.Command)
	if err != nil {
		return nil, err
	}
	if req.TimeoutSec < 0 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "timeoutSec must not be negative")
	}
	if !req.TTY && (req.Cols != 0 || req.Rows != 0) {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "cols and rows are for a tty process")
	}
	env, err := service.ValidEnv(req.Env)
	if err != nil {
		return nil, err
	}
	if req.Session != "" {
		if err := sandbox.CheckSessionName("session", req.Session); err != nil {
			return nil, err
		}
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.roomForProcess(ctx, work, ps, sb); err != nil {
		return nil, err
	}
	dir := imageDir
	if dir == "" {
		if dir, err = sandbox.ResolvePath(sb.Workdir, req.Dir); err != nil {
			return nil, err
		}
	}
	a, err := s.ask(ctx, work, sb, procRequest{Op: "start", Argv: argv, Dir: dir, Env: env, TTY: req.TTY, Cols: req.Cols, Rows: req.Rows,
		TimeoutSec: req.TimeoutSec, Stdin: req.Stdin}, nil)
	if err != nil {
		return nil, err
	}
	if a.Process == nil {
		return nil, sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's process daemon answered nonsense")
	}
	rec := toStore(sb.ID, a.Boot, a.Process)
	rec.Session = req.Session
	if err := ps.PutProcess(ctx, rec); err != nil {
		return nil, err
	}
	if narr := s.narration(ctx, req.Session, nil); narr != nil {
		narr.Event("start", fmt.Sprintf("%s: process %d: %s", sb.ID, rec.Pid, service.CommandLine(argv)))
	}
	p := view(rec, a.Process)
	return &p, nil
}

// roomForProcess refuses a start (KindLimit) when the records of sb's
// running processes are at store.MaxProcessRecords. Records the store
// holds as running may have ended unseen, so at the bound the daemon is
// asked first (its list marks them ended or lost).
func (s *Processes) roomForProcess(ctx, work context.Context, ps Store, sb *sandbox.Sandbox) error {
	running := func(recs []store.Process) (n int) {
		for _, r := range recs {
			if r.EndedAt.IsZero() && !r.Lost {
				n++
			}
		}
		return n
	}
	recs, err := ps.Processes(ctx, sb.ID)
	if err != nil || running(recs) < store.MaxProcessRecords {
		return err
	}
	asked := time.Now()
	a, err := s.ask(ctx, work, sb, procRequest{Op: "list"}, nil)
	if err != nil {
		return err
	}
	if _, err := s.merge(ctx, ps, sb.ID, a, asked); err != nil {
		return err
	}
	if recs, err = ps.Processes(ctx, sb.ID); err != nil {
		return err
	}
	if running(recs) >= store.MaxProcessRecords {
		return &sandbox.Error{Kind: sandbox.KindLimit, RetryAfter: 1,
			Msg: fmt.Sprintf("%d processes of this sandbox are running; that is the most it keeps: end some first", store.MaxProcessRecords)}
	}
	return nil
}

// raceMargin is how long before a list a process of the same boot must
// have started for its absence from the list to mean it was forgotten:
// the daemon's clock is the host's, and a start and its record take well
// under this.
const raceMargin = 2 * time.Second

func toStore(id, boot string, r *procRecord) store.Process {
	p := store.Process{Sandbox: id, Boot: boot, Pid: r.Pid, Argv: r.Argv, Dir: r.Dir, TTY: r.TTY,
		StartedAt: time.UnixMilli(r.Started).UTC(), ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut}
	if r.Ended > 0 {
		p.EndedAt = time.UnixMilli(r.Ended).UTC()
	}
	return p
}

// view is the wire form of a record, with the live counts when the
// daemon still holds the process (live non-nil).
func view(p store.Process, live *procRecord) Process {
	v := Process{Pid: p.Pid, Argv: p.Argv, Dir: p.Dir, TTY: p.TTY, Session: p.Session, Status: ProcessRunning,
		StartedAt: p.StartedAt.Unix(), ExitCode: p.ExitCode, TimedOut: p.TimedOut}
	if v.Argv == nil {
		v.Argv = []string{}
	}
	switch {
	case p.Lost:
		v.Status = ProcessLost
	case !p.EndedAt.IsZero():
		v.Status, v.EndedAt = ProcessExited, p.EndedAt.Unix()
	}
	if p.Signal > 0 {
		v.Signal = signalName(p.Signal)
	}
	if live != nil {
		v.OutputBytes, v.DroppedBytes, v.StdinOpen = live.Output, live.Dropped, live.StdinOpen
	}
	return v
}

// changed says whether the daemon's record says more than the stored one.
func changed(stored store.Process, now store.Process) bool {
	return stored.EndedAt.IsZero() != now.EndedAt.IsZero() || stored.Lost != now.Lost
}

// Processes lists sandbox id's background processes, running and recently
// finished, oldest first. A running sandbox's daemon is asked (and what it
// says is recorded); a sleeping one is answered from the records, without
// waking it.
func (s *Processes) Processes(ctx context.Context, id string) ([]Process, error) {
	ps, err := s.processes()
	if err != nil {
		return nil, err
	}
	sb, err := s.sb.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Status != sandbox.StatusRunning {
		recs, err := ps.Processes(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		out := make([]Process, 0, len(recs))
		for _, r := range recs {
			out = append(out, view(r, nil))
		}
		return out, nil
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	asked := time.Now()
	a, err := s.ask(ctx, work, sb, procRequest{Op: "list"}, nil)
	if err != nil {
		return nil, err
	}
	return s.merge(ctx, ps, sb.ID, a, asked)
}

// merge records what the daemon's list a says and answers the whole
// record: the daemon's processes with their live counts, then the stored
// ones it no longer holds. A stored process that was running is lost when
// the daemon does not hold it: of another boot, it died with its init; of
// this one, it ended and the daemon forgot it (it keeps the last few
// finished), so its end is unknown — unless it started about when the
// list was asked (a start racing the list is not in it yet).
func (s *Processes) merge(ctx context.Context, ps Store, id string, a *procAnswer, asked time.Time) ([]Process, error) {
	recs, err := ps.Processes(ctx, id)
	if err != nil {
		return nil, err
	}
	type key struct {
		boot string
		pid  int
	}
	stored := map[key]store.Process{}
	for _, r := range recs {
		stored[key{r.Boot, r.Pid}] = r
	}
	seen := map[key]bool{}
	for _, lr := range a.Processes {
		if lr != nil {
			seen[key{a.Boot, lr.Pid}] = true
		}
	}
	// The lost first: they make room for the daemon's running ones.
	var out []Process
	for _, r := range recs {
		if seen[key{r.Boot, r.Pid}] {
			continue
		}
		if r.EndedAt.IsZero() && !r.Lost && (r.Boot != a.Boot || r.StartedAt.Before(asked.Add(-raceMargin))) {
			r.Lost = true
			if err := ps.PutProcess(ctx, r); err != nil {
				return nil, err
			}
		}
		out = append(out, view(r, nil))
	}
	// A finished process the store no longer holds, older than all it
	// holds when full, was pruned: it is not written back.
	var oldest time.Time
	if len(recs) >= store.MaxProcessRecords {
		oldest = recs[0].StartedAt
	}
	for _, lr := range a.Processes {
		if lr == nil {
			continue
		}
		k := key{a.Boot, lr.Pid}
		now := toStore(id, a.Boot, lr)
		old, ok := stored[k]
		if !ok && !now.EndedAt.IsZero() && now.StartedAt.Before(oldest) {
			continue
		}
		if ok {
			now.Session = old.Session
		}
		if !ok || changed(old, now) {
			if err := ps.PutProcess(ctx, now); err != nil {
				return nil, err
			}
		}
		out = append(out, view(now, lr))
	}
	slices.SortStableFunc(out, func(a, b Process) int {
		if a.StartedAt != b.StartedAt {
			return int(a.StartedAt - b.StartedAt)
		}
		return a.Pid - b.Pid
	})
	return out, nil
}

// GetProcess is one process of sandbox id: the current boot's if its
// daemon has it, else the latest record of that pid.
func (s *Processes) GetProcess(ctx context.Context, id string, pid int) (*Process, error) {
	list, err := s.Processes(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Pid == pid {
			return &list[i], nil
		}
	}
	return nil, sandbox.Errorf(sandbox.KindNotFound, "no process %d in this sandbox", pid)
}

// record writes the daemon's record of one process, keeping the stored
// session.
func (s *Processes) record(ctx context.Context, ps Store, id, boot string, r *procRecord) Process {
	now := toStore(id, boot, r)
	if recs, err := ps.Processes(ctx, id); err == nil {
		for _, old := range recs {
			if old.Boot == boot && old.Pid == r.Pid {
				now.Session = old.Session
				if !changed(old, now) {
					return view(now, r)
				}
			}
		}
	}
	if err := ps.PutProcess(ctx, now); err != nil {
		s.log.Warn("recording a process", "sandbox", id, "pid", r.Pid, "err", err)
	}
	return view(now, r)
}

// signals are the names a caller may send (with or without SIG).
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "STOP": syscall.SIGSTOP,
	"CONT": syscall.SIGCONT, "WINCH": syscall.SIGWINCH, "ALRM": syscall.SIGALRM, "PIPE": syscall.SIGPIPE,
}

func signalName(n int) string {
	for name, s := range signals {
		if int(s) == n {
			return "SIG" + name
		}
	}
	return "signal " + strconv.Itoa(n)
}

// ParseSignal reads a signal by name (TERM, SIGTERM, term) or number.
func ParseSignal(v string) (int, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(v)), "SIG")
	if s, ok := signals[name]; ok {
		return int(s), nil
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 && n <= 64 {
		return n, nil
	}
	return 0, sandbox.Errorf(sandbox.KindInvalid, "unknown signal %q: use a name such as TERM, INT, KILL, HUP, USR1, or a number 1-64", v)
}

// SignalRequest is the body of POST .../processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal" jsonschema:"a signal name (TERM, INT, KILL, HUP, USR1, ...) or number; sent to the process's group"`
}

// SignalProcess sends a signal to a process (and its group).
func (s *Processes) SignalProcess(ctx context.Context, id string, pid int, sig string) (*Process, error) {
	n, err := ParseSignal(sig)
	if err != nil {
		return nil, err
	}
	return s.operate(ctx, id, procRequest{Op: "signal", Pid: pid, Signal: n})
}

// ResizeRequest is the body of POST .../processes/{pid}/resize.
type ResizeRequest struct {
	Cols uint16 `json:"cols" jsonschema:"columns"`
	Rows uint16 `json:"rows" jsonschema:"rows"`
}

// ResizeProcess changes a tty process's terminal size.
func (s *Processes) ResizeProcess(ctx context.Context, id string, pid int, size ResizeRequest) (*Process, error) {
	if size.Cols == 0 || size.Rows == 0 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "cols and rows must be positive")
	}
	return s.operate(ctx, id, procRequest{Op: "resize", Pid: pid, Cols: size.Cols, Rows: size.Rows})
}

func (s *Processes) operate(ctx context.Context, id string, req procRequest) (*Process, error) {
	ps, err := s.processes()
	if err != nil {
		return nil, err
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	a, err := s.ask(ctx, work, sb, req, nil)
	if err != nil {
		return nil, err
	}
	if a.Process == nil {
		return nil, sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's process daemon answered nonsense")
	}
	p := s.record(ctx, ps, sb.ID, a.Boot, a.Process)
	return &p, nil
}

// StdinResult says what POST .../stdin wrote.
type StdinResult = wire.StdinResult

// maxStdin bounds one stdin call's body.
const maxStdin = 16 << 20

// ProcessStdin writes r to a process's stdin and, with eof, closes it
// (a tty process is sent ^D instead).
func (s *Processes) ProcessStdin(ctx context.Context, id string, pid int, r io.Reader, eof bool) (*StdinResult, error) {
	ps, err := s.processes()
	if err != nil {
		return nil, err
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	lr := &io.LimitedReader{R: r, N: maxStdin + 1}
	a, err := s.ask(ctx, work, sb, procRequest{Op: "stdin", Pid: pid, EOF: eof}, lr)
	if lr.N <= 0 {
		return nil, sandbox.Errorf(sandbox.KindTooLarge, "stdin bodies are at most %d bytes a call", maxStdin)
	}
	if err != nil {
		return nil, err
	}
	if a.Process == nil {
		return nil, sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's process daemon answered nonsense")
	}
	return &StdinResult{Written: a.Written, Process: s.record(ctx, ps, sb.ID, a.Boot, a.Process)}, nil
}

// OutputEvent is one piece of a process's output stream.
type OutputEvent struct {
	// Kind is stdout, stderr, dropped (Bytes of output before Offset are
	// gone), end (the process ended: Process), state (the stream was not
	// followed: Process as it is), or ping (nothing new; the stream lives).
	Kind string
	// Offset is where the event ends in everything the process wrote: a
	// reader that has it resumes from there (SSE id).
	Offset  int64
	Data    []byte
	Bytes   int64
	Process *Process
}

// ProcessOutput sends emit the output of process pid after offset from —
// what the ring still holds, then, with follow, what comes — until the
// process ends (an "end" event) or emit fails. Without follow the last
// event is "state".
func (s *Processes) ProcessOutput(ctx context.Context, id string, pid int, from int64, follow bool, emit func(OutputEvent) error) error {
	ps, err := s.processes()
	if err != nil {
		return err
	}
	if from < 0 {
		return sandbox.Errorf(sandbox.KindInvalid, "the offset must not be negative")
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	work, cancel := context.WithCancelCause(work)
	defer cancel(nil)
	pr, pw := io.Pipe()
	parsed := make(chan error, 1)
	var boot string
	go func() {
		err := ReadFrames(pr, func(f Frame, data []byte) error {
			ev := OutputEvent{Kind: f.S, Offset: f.Off + int64(len(data)), Data: data}
			switch f.S {
			case "stdout", "stderr":
			case "dropped":
				ev.Offset, ev.Bytes = f.Off, int64(f.N)
			case "end", "state":
				if f.End == nil {
					return errors.New("an end without a record")
				}
				p := s.record(context.WithoutCancel(ctx), ps, sb.ID, boot, f.End)
				ev.Offset, ev.Process = f.End.Output, &p
			case "ping":
				ev.Offset = -1
			case "answer":
				return daemonError(pid, f.Error)
			default:
				return nil // a kind this server does not know: skipped
			}
			return emit(ev)
		})
		if err != nil {
			cancel(err)
		}
		io.Copy(io.Discard, pr)
		parsed <- err
	}()
	a, err := s.askWith(ctx, func(r runtime.ExecRequest) (service.Outcome, error) {
		return s.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: r, Exec: s.viaRelay(sb, false)})
	}, procRequest{Op: "boot"}, nil)
	if err != nil {
		pw.Close()
		<-parsed
		return err
	}
	boot = a.Boot
	err = s.call(ctx, func(r runtime.ExecRequest) (service.Outcome, error) {
		return s.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: r, Exec: s.viaRelay(sb, false)})
	}, procRequest{Op: "output", Pid: pid, From: from, Follow: follow}, nil, pw)
	pw.Close()
	perr := <-parsed
	var se *sandbox.Error
	switch {
	case errors.As(perr, &se):
		return perr
	case perr != nil && ctx.Err() == nil:
		if errors.Is(perr, errEmit) {
			return nil // the reader went away
		}
		return sandbox.Wrap(sandbox.KindBadGateway, perr, "the sandbox's process daemon sent a broken stream")
	}
	return err
}

var errEmit = errors.New("emit failed")

// Frame heads one piece of the daemon's output stream.
type Frame = procwire.Frame

// Bounds on the daemon's frames: it runs in the sandbox.
const (
	maxFrameHead = 1 << 20
	maxFrameData = 1 << 20
)

// ReadFrames parses the daemon's output stream and calls fn for each
// frame; a malformed stream is an error, and so is fn's (wrapped as
// errEmit when it is not a *sandbox.Error).
func ReadFrames(r io.Reader, fn func(Frame, []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readBounded(br, maxFrameHead)
		if err == io.EOF && len(line) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		var f Frame
		if err := json.Unmarshal(line, &f); err != nil {
			return fmt.Errorf("frame head: %w", err)
		}
		if f.S == "" && f.Error != "" {
			f.S = "answer"
		}
		var data []byte
		if f.S == "stdout" || f.S == "stderr" {
			if f.N < 0 || f.N > maxFrameData || f.Off < 0 {
				return fmt.Errorf("frame of %d bytes at %d", f.N, f.Off)
			}
			data = make([]byte, f.N)
			if _, err := io.ReadFull(br, data); err != nil {
				return fmt.Errorf("frame data: %w", err)
			}
		} else if f.N < 0 || f.Off < 0 {
			return fmt.Errorf("frame %q with %d at %d", f.S, f.N, f.Off)
		}
		if err := fn(f, data); err != nil {
			var se *sandbox.Error
			if errors.As(err, &se) {
				return err
			}
			return fmt.Errorf("%w: %w", errEmit, err)
		}
	}
}

func readBounded(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > max {
			return nil, fmt.Errorf("a frame head over %d bytes", max)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil:
			if len(line) > 0 && err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return line, err
		}
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
}

// processesRunning says whether sandbox sb has a background process
// running, by its records and, when they say so, by asking its daemon (so
// a record whose end was never read does not keep it awake forever). It
// runs the daemon's program straight on the runtime: it is called where
// no work may be registered (the idle sleep).
func (s *Processes) Running(ctx context.Context, sb *sandbox.Sandbox) bool {
	ps, err := s.processes()
	if err != nil {
		return false
	}
	recs, err := ps.Processes(ctx, sb.ID)
	if err != nil {
		return true // unknown: stay awake, look again next round
	}
	if !slices.ContainsFunc(recs, func(r store.Process) bool { return r.EndedAt.IsZero() && !r.Lost }) {
		return false
	}
	asked := time.Now()
	a, err := s.askWith(ctx, func(r runtime.ExecRequest) (service.Outcome, error) {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := s.rt.Exec(tctx, sb.Name, r)
		var exit *runtime.ExitError
		if errors.As(err, &exit) {
			return service.Outcome{Code: exit.Code}, nil
		}
		return service.Outcome{}, err
	}, procRequest{Op: "list"}, nil)
	if err != nil {
		return false
	}
	list, err := s.merge(ctx, ps, sb.ID, a, asked)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(list, func(p Process) bool { return p.Status == ProcessRunning })
}

// Sandboxes is the service's seam the processes stand on.
type Sandboxes interface {
	// Use opens a piece of work on a running sandbox of the caller's org.
	Use(ctx context.Context, id string) (*sandbox.Sandbox, context.Context, func(), error)
	// RunIn runs a program in a sandbox in use.
	RunIn(ctx, work context.Context, sb *sandbox.Sandbox, cmd service.Command) (service.Outcome, error)
	// Get is a sandbox of the caller's org.
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
}

// Execer runs a program straight on the runtime, outside any work: the
// idle sleep asks the daemon so where no work may be registered.
type Execer interface {
	Exec(ctx context.Context, name string, req runtime.ExecRequest) error
}

// Processes are the background processes of the sandboxes: started
// through the in-sandbox runner's daemon (sandbox-runner init, over the
// exec channel), their records kept in the org's store so that they
// outlive a restart and a sleep.
type Processes struct {
	sb      Sandboxes
	st      Store
	rt      Execer
	runner  runtime.Runner // nil: the backend has none, and every call is 501
	relays  *pool.Pool     // nil: an exec per call
	backend string
	narr    narrate.Appender
	log     *slog.Logger
}

// New are the processes of sb's sandboxes. runner nil (a backend with no
// in-sandbox runner) answers every call 501; relays nil reaches the daemon
// by an exec of `sandbox-runner proc` per call; narr nil narrates nothing.
func New(sb Sandboxes, st Store, rt Execer, runner runtime.Runner, relays *pool.Pool, backend string, narr narrate.Appender, log *slog.Logger) *Processes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Processes{sb: sb, st: st, rt: rt, runner: runner, relays: relays, backend: backend, narr: narr, log: log}
}

// viaRelay is how a call of a caller's work reaches sb's daemon: a stream
// of the sandbox's relay (internal/relay/pool), which costs no process
// start, in place of an exec of `sandbox-runner proc`. A relay that cannot
// start falls back to that exec.
//
// The stream's sending half is closed after the request only when the
// daemon reads data to its end (withData: stdin for a process); the
// answer follows at once. Any other request is one line, and its answer
// may take minutes (a kernel's start on a busy machine, a context's run, an
// output followed): a half-closed stream whose other end has not closed is
// dropped by yamux after its StreamCloseTimeout (30 s), and a dropped
// stream reads as a clean end, an empty answer. Held open, the stream
// closes whole once the answer has ended, or when ctx does.
func (s *Processes) viaRelay(sb *sandbox.Sandbox, withData bool) func(context.Context, string, runtime.ExecRequest) error {
	if s.relays == nil {
		return nil
	}
	return func(ctx context.Context, name string, req runtime.ExecRequest) error {
		c, err := s.relays.Procd(ctx, sb)
		switch {
		case errors.Is(err, relay.ErrNoDaemon):
			return &runtime.ExitError{Code: 3}
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, relay.ErrNoRelay): // a runner from before the relay
			return s.rt.Exec(ctx, name, req)
		case err != nil:
			s.log.Warn("the relay did not start; the daemon is reached by exec", "sandbox", sb.ID, "err", err)
			return s.rt.Exec(ctx, name, req)
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			if req.Stdin != nil {
				io.Copy(c, req.Stdin)
			}
			if withData {
				c.(interface{ CloseWrite() error }).CloseWrite()
			}
		}()
		_, err = io.Copy(req.Stdout, c)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		<-sent // the daemon answers once it has read all it was sent
		return err
	}
}

// narration is the narration of a process's start for session, or nil.
func (s *Processes) narration(ctx context.Context, session string, secrets []string) *narrate.Command {
	return narrate.ForCaller(ctx, s.narr, session, secrets, service.OutputCap)
}

// Daemon sends one request to sandbox id's process daemon and answers its
// answer: the seam the code contexts (internal/contexts) reach their
// kernels through. A refusal of the daemon is the caller's error.
func (s *Processes) Daemon(ctx context.Context, id string, req procwire.Request) (*procwire.Answer, error) {
	if _, err := s.processes(); err != nil {
		return nil, err
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.ask(ctx, work, sb, req, nil)
}

// DaemonStream sends req to sandbox id's daemon and copies what it
// answers to out, for a request answered by a stream (a context's run).
// The stream is the caller's code running: the sandbox is in use, and
// keeps its API socket, until it ends; limit bounds it (zero: the caller's
// context only).
func (s *Processes) DaemonStream(ctx context.Context, id string, req procwire.Request, limit time.Duration, out io.Writer) error {
	if _, err := s.processes(); err != nil {
		return err
	}
	sb, work, done, err := s.sb.Use(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	return s.call(ctx, func(r runtime.ExecRequest) (service.Outcome, error) {
		o, err := s.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: r, Metric: "context", Exec: s.viaRelay(sb, false), Code: true, Timeout: limit})
		if err == nil && o.TimedOut {
			return o, sandbox.Errorf(sandbox.KindTimeout, "the run did not end %s after it began, though its kernel was interrupted", limit)
		}
		return o, err
	}, req, nil, out)
}
