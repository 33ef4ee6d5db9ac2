package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/wire"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// ProcessRequest is a background process: Argv wins; else Command runs
// with sh -c.
type ProcessRequest = wire.ProcessRequest

// Process is a background process's record. Its times are Unix seconds.
type Process = wire.Process

func processPath(id string, pid int) string {
	return "/v1/sandbox/" + esc(id) + "/processes/" + strconv.Itoa(pid)
}

// StartProcess starts a background process and returns at once: it runs
// on after the call, its output kept.
func (c *Client) StartProcess(ctx context.Context, id string, req ProcessRequest) (*Process, error) {
	var p Process
	return &p, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/processes", in: req, out: &p})
}

// Processes lists a sandbox's background processes, running and finished,
// oldest first.
func (c *Client) Processes(ctx context.Context, id string) ([]Process, error) {
	var b struct {
		Processes []Process `json:"processes"`
	}
	return b.Processes, c.do(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/processes", out: &b})
}

// Process returns one background process.
func (c *Client) Process(ctx context.Context, id string, pid int) (*Process, error) {
	var p Process
	return &p, c.do(ctx, request{method: "GET", path: processPath(id, pid), out: &p})
}

// ProcessEvent is one piece of a process's output stream.
type ProcessEvent struct {
	// Kind is stdout or stderr (Data), dropped (DroppedBytes of output
	// before Offset are no longer kept), or end (the process ended:
	// Process).
	Kind string
	// Offset is where the event ends in all the process wrote: pass it as
	// from to read on after it.
	Offset       int64
	Data         []byte
	DroppedBytes int64
	Process      *Process
}

// ProcessOutput streams a process's output after the offset from (0: all
// the server still keeps), then what comes, until the process ends (the
// last event is "end"), fn fails (its error is returned) or ctx ends. A
// stream that breaks is resumed after the last event seen, so fn sees
// each byte once; it gives up when several tries in a row bring nothing.
func (c *Client) ProcessOutput(ctx context.Context, id string, pid int, from int64, fn func(ProcessEvent) error) error {
	return resume(ctx, from, fmt.Sprintf("the output stream of process %d", pid), func(from int64) (int64, bool, error) {
		return c.outputOnce(ctx, id, pid, from, fn)
	})
}

// handlerError is an error of the caller's fn, handed back as it is.
type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

// outputOnce reads one connection of the output stream; it returns the
// offset after the last event handed to fn (from when none), and whether
// the end was seen.
func (c *Client) outputOnce(ctx context.Context, id string, pid int, from int64, fn func(ProcessEvent) error) (int64, bool, error) {
	q := url.Values{}
	if from > 0 {
		q.Set("from", strconv.FormatInt(from, 10))
	}
	res, err := c.send(ctx, request{method: "GET", path: processPath(id, pid) + "/output", query: q, accept: "text/event-stream"})
	if err != nil {
		return from, false, err
	}
	defer res.Body.Close()
	last := from
	err = readSSE(res.Body, 8<<20, func(e sseEvent) error {
		pe, err := processEvent(e.kind, e.data)
		if err != nil || pe == nil {
			return err // nil: a kind this client does not know
		}
		if e.kind == "error" {
			return fmt.Errorf("client: the output stream: %s", e.data)
		}
		if pe.Offset, err = strconv.ParseInt(e.id, 10, 64); err != nil {
			return fmt.Errorf("client: an output event without an offset: %q", e.id)
		}
		if err := fn(*pe); err != nil {
			return handlerError{err}
		}
		last = pe.Offset
		if e.kind == "end" {
			return errEnded
		}
		return nil
	})
	if errors.Is(err, errEnded) {
		return last, true, nil
	}
	return last, false, err
}

// errEnded stops reading an output stream at its end event.
var errEnded = errors.New("the output ended")

// processEvent decodes one event's data; nil for an event to skip.
func processEvent(kind, data string) (*ProcessEvent, error) {
	pe := &ProcessEvent{Kind: kind}
	switch kind {
	case "stdout", "stderr":
		var c struct{ Stdout, Stderr, StdoutBase64, StderrBase64 string }
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return nil, fmt.Errorf("client: an output event: %w", err)
		}
		text, b64 := c.Stdout+c.Stderr, c.StdoutBase64+c.StderrBase64
		pe.Data = []byte(text)
		if b64 != "" {
			b, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return nil, fmt.Errorf("client: an output event: %w", err)
			}
			pe.Data = b
		}
	case "dropped":
		var d struct {
			DroppedBytes int64 `json:"droppedBytes"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			return nil, fmt.Errorf("client: a dropped event: %w", err)
		}
		pe.DroppedBytes = d.DroppedBytes
	case "end", "state":
		var p Process
		if err := json.Unmarshal([]byte(data), &p); err != nil {
			return nil, fmt.Errorf("client: an end event: %w", err)
		}
		pe.Process = &p
	case "error":
	default:
		return nil, nil
	}
	return pe, nil
}

// OutputText is what a process wrote after an offset, at once: text when
// it is UTF-8, else base64 (StdoutBase64, StderrBase64; StdoutBytes and
// StderrBytes decode either).
type OutputText = wire.OutputText

// ProcessOutputText returns what a process wrote after the offset from,
// as much as the server keeps, without waiting for more.
func (c *Client) ProcessOutputText(ctx context.Context, id string, pid int, from int64) (*OutputText, error) {
	q := url.Values{}
	if from > 0 {
		q.Set("from", strconv.FormatInt(from, 10))
	}
	var o OutputText
	return &o, c.do(ctx, request{method: "GET", path: processPath(id, pid) + "/output", query: q, accept: "application/json", out: &o})
}

// StdinResult is a write to a process's stdin.
type StdinResult = wire.StdinResult

// ProcessStdin writes r to a process's stdin (at most 16 MiB a call) and,
// with eof, closes it (a tty process is sent ^D instead).
func (c *Client) ProcessStdin(ctx context.Context, id string, pid int, r io.Reader, eof bool) (*StdinResult, error) {
	if r == nil {
		r = strings.NewReader("")
	}
	q := url.Values{}
	if eof {
		q.Set("eof", "1")
	}
	var s StdinResult
	return &s, c.do(ctx, request{method: "POST", path: processPath(id, pid) + "/stdin", query: q, body: r,
		contentType: "application/octet-stream", out: &s})
}

// SignalProcess sends a signal (a name such as TERM, INT, KILL, or a
// number) to a process and its group.
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, signal string) (*Process, error) {
	var p Process
	return &p, c.do(ctx, request{method: "POST", path: processPath(id, pid) + "/signal", in: map[string]string{"signal": signal}, out: &p})
}

// ResizeProcess sets a tty process's terminal size.
func (c *Client) ResizeProcess(ctx context.Context, id string, pid int, cols, rows uint16) (*Process, error) {
	var p Process
	return &p, c.do(ctx, request{method: "POST", path: processPath(id, pid) + "/resize", in: map[string]uint16{"cols": cols, "rows": rows}, out: &p})
}
