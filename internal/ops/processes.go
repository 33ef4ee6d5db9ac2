package ops

import (
	"context"
	"encoding/base64"
	"github.com/sandboxd/sandbox/internal/processes"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// Processes is what the background-process ops need of the service.
type Processes interface {
	StartProcess(ctx context.Context, id string, req processes.ProcessRequest) (*processes.Process, error)
	Processes(ctx context.Context, id string) ([]processes.Process, error)
	ProcessOutput(ctx context.Context, id string, pid int, from int64, follow bool, emit func(processes.OutputEvent) error) error
	ProcessStdin(ctx context.Context, id string, pid int, r io.Reader, eof bool) (*processes.StdinResult, error)
	SignalProcess(ctx context.Context, id string, pid int, sig string) (*processes.Process, error)
}

var _ Processes = (*processes.Processes)(nil)

func (o *Ops) processes() (Processes, error) {
	if o.procs == nil {
		return nil, sandbox.Errorf(sandbox.KindUnsupported, "this server runs no background processes")
	}
	return o.procs, nil
}

// ProcessStartIn is a background process to start: the process request
// itself, and the sandbox's id.
type ProcessStartIn struct {
	ID string `json:"id" jsonschema:"the sandbox to start it in"`
	processes.ProcessRequest
}

// ProcessStart starts a background process and answers at once with its
// record (its pid names it to the other process ops); it runs on after
// the call, its output kept.
func (o *Ops) ProcessStart(ctx context.Context, in ProcessStartIn) (*processes.Process, error) {
	p, err := o.processes()
	if err != nil {
		return nil, err
	}
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	return p.StartProcess(ctx, in.ID, in.ProcessRequest)
}

// ProcessListOut is a sandbox's background processes.
type ProcessListOut struct {
	Processes []processes.Process `json:"processes"`
}

// ProcessList lists a sandbox's background processes, running and
// finished, oldest first.
func (o *Ops) ProcessList(ctx context.Context, in IDIn) (*ProcessListOut, error) {
	p, err := o.processes()
	if err != nil {
		return nil, err
	}
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	list, err := p.Processes(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []processes.Process{}
	}
	return &ProcessListOut{Processes: list}, nil
}

// OutputIn asks for a process's output after an offset.
type OutputIn struct {
	ID   string `json:"id" jsonschema:"the sandbox"`
	Pid  int    `json:"pid" jsonschema:"the process's pid (from process_start or process_list)"`
	From int64  `json:"from,omitempty" jsonschema:"the offset in all the process wrote to read after: 0 for everything still kept, or the next of an earlier answer for only what came since"`
}

// OutputOut is what a process wrote after an offset, as much as is kept:
// text when it is UTF-8, else base64 (stdoutBase64, stderrBase64).
type OutputOut = wire.OutputText

// ProcessOutput answers what a process wrote after in.From, at once (it
// does not wait for more), with the offset to ask from next and the
// process's record.
func (o *Ops) ProcessOutput(ctx context.Context, in OutputIn) (*OutputOut, error) {
	p, err := o.processes()
	if err != nil {
		return nil, err
	}
	if err := needProcess(in.ID, in.Pid); err != nil {
		return nil, err
	}
	return CollectOutput(ctx, p, in.ID, in.Pid, in.From)
}

// OutputSource is the service's process output stream.
type OutputSource interface {
	ProcessOutput(ctx context.Context, id string, pid int, from int64, follow bool, emit func(processes.OutputEvent) error) error
}

// CollectOutput reads what process pid wrote after from without following
// it: the typed op's answer, and the REST route's with Accept:
// application/json.
func CollectOutput(ctx context.Context, src OutputSource, id string, pid int, from int64) (*OutputOut, error) {
	var stdout, stderr []byte
	out := &OutputOut{Next: from}
	err := src.ProcessOutput(ctx, id, pid, from, false, func(ev processes.OutputEvent) error {
		switch ev.Kind {
		case "stdout":
			stdout = append(stdout, ev.Data...)
		case "stderr":
			stderr = append(stderr, ev.Data...)
		case "dropped":
			out.DroppedBytes += ev.Bytes
		case "end", "state":
			out.Process = ev.Process
		}
		if ev.Offset >= 0 {
			out.Next = ev.Offset
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Stdout, out.StdoutBase64 = textOr64(stdout)
	out.Stderr, out.StderrBase64 = textOr64(stderr)
	return out, nil
}

// textOr64 is b as text when it is UTF-8, else as base64.
func textOr64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

// StdinIn is text for a process's stdin.
type StdinIn struct {
	ID   string `json:"id" jsonschema:"the sandbox"`
	Pid  int    `json:"pid" jsonschema:"the process's pid"`
	Text string `json:"text,omitempty" jsonschema:"written to the process's stdin as is (add the newline a line needs)"`
	EOF  bool   `json:"eof,omitempty" jsonschema:"close stdin after the text (a tty process is sent ^D instead)"`
}

// ProcessStdin writes text to a process's stdin and, with eof, closes it.
func (o *Ops) ProcessStdin(ctx context.Context, in StdinIn) (*processes.StdinResult, error) {
	p, err := o.processes()
	if err != nil {
		return nil, err
	}
	if err := needProcess(in.ID, in.Pid); err != nil {
		return nil, err
	}
	return p.ProcessStdin(ctx, in.ID, in.Pid, strings.NewReader(in.Text), in.EOF)
}

// SignalIn is a signal for a process.
type SignalIn struct {
	ID     string `json:"id" jsonschema:"the sandbox"`
	Pid    int    `json:"pid" jsonschema:"the process's pid"`
	Signal string `json:"signal,omitempty" jsonschema:"a signal name (TERM, INT, KILL, HUP, USR1, ...) or number; default TERM; sent to the process's group"`
}

// ProcessSignal sends a signal (TERM unless it names one) to a process and
// its group, and answers its record.
func (o *Ops) ProcessSignal(ctx context.Context, in SignalIn) (*processes.Process, error) {
	p, err := o.processes()
	if err != nil {
		return nil, err
	}
	if err := needProcess(in.ID, in.Pid); err != nil {
		return nil, err
	}
	sig := in.Signal
	if sig == "" {
		sig = "TERM"
	}
	return p.SignalProcess(ctx, in.ID, in.Pid, sig)
}

func needProcess(id string, pid int) error {
	if err := needID(id); err != nil {
		return err
	}
	if pid <= 0 {
		return sandbox.Errorf(sandbox.KindInvalid, "pid is required: the process to act on (process_list lists them)")
	}
	return nil
}
