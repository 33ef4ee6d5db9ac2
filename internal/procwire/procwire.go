// Package procwire is the protocol between the server and the process
// daemon inside a gVisor sandbox (cmd/sandbox-runner init, reached over
// the exec channel through `sandbox-runner proc`): one JSON request, then
// one JSON answer or, for output, a stream of frames. Both ends use these
// types, so they cannot drift apart. It imports nothing of the module's:
// the runner is a static binary of its own.
//
// The daemon runs where hostile code runs; the server reads what it says
// as untrusted input (processes.ReadFrames, bounded and fuzzed).
package procwire

import "encoding/json"

// Socket is the daemon's address inside the sandbox: an abstract Unix
// socket, one connection per request.
const Socket = "@sandbox-procd"

// MaxRequest bounds a request line as the daemon reads it. The server
// refuses a longer one before sending it: the daemon would answer "request
// too long" without reading the rest, and the rest would wait for a reader.
const MaxRequest = 1 << 20

// Request is one call to the daemon.
type Request struct {
	Op         string   `json:"op"`
	Pid        int      `json:"pid,omitempty"`
	Argv       []string `json:"argv,omitempty"`
	Dir        string   `json:"dir,omitempty"`
	Env        []string `json:"env,omitempty"`
	TTY        bool     `json:"tty,omitempty"`
	Cols       uint16   `json:"cols,omitempty"`
	Rows       uint16   `json:"rows,omitempty"`
	TimeoutSec int      `json:"timeoutSec,omitempty"`
	Stdin      string   `json:"stdin,omitempty"`
	From       int64    `json:"from,omitempty"`
	Follow     bool     `json:"follow,omitempty"`
	EOF        bool     `json:"eof,omitempty"`
	Signal     int      `json:"signal,omitempty"`
	// Code contexts (ops ctxnew, ctxlist, ctxrun, ctxint, ctxdel): the
	// context's id, its kernel (a Jupyter kernelspec name) and the code
	// of a run.
	Ctx    string `json:"ctx,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	Code   string `json:"code,omitempty"`
}

// Context is a code context the daemon holds: a Jupyter kernel and the
// driver that speaks to it (cmd/sandbox-runner/contexts.go).
type Context struct {
	ID      string `json:"id"`
	Kernel  string `json:"kernel"`
	Dir     string `json:"dir"`
	Started int64  `json:"started"` // Unix ms
	Busy    bool   `json:"busy,omitempty"`
}

// Event is one line of a context run's stream (op ctxrun), as the driver
// writes it: "stdout"/"stderr" with Text, "result" with Data (a MIME
// bundle) and IsMain, "error" with Name, Value and Traceback, and last
// "end" with Count (the execution count) and TimedOut. A line with only
// Error is a refusal instead of a stream.
type Event struct {
	Type      string                     `json:"type,omitempty"`
	Text      string                     `json:"text,omitempty"`
	Data      map[string]json.RawMessage `json:"data,omitempty"`
	IsMain    bool                       `json:"isMainResult,omitempty"`
	Name      string                     `json:"name,omitempty"`
	Value     string                     `json:"value,omitempty"`
	Traceback []string                   `json:"traceback,omitempty"`
	Count     int                        `json:"executionCount,omitempty"`
	TimedOut  bool                       `json:"timedOut,omitempty"`
	Error     string                     `json:"error,omitempty"`
}

// Record is what the daemon says of a process (the server's
// runtime-independent view is built from it).
type Record struct {
	Pid       int      `json:"pid"`
	Argv      []string `json:"argv"`
	Dir       string   `json:"dir"`
	TTY       bool     `json:"tty,omitempty"`
	Started   int64    `json:"started"` // Unix ms
	Ended     int64    `json:"ended,omitempty"`
	ExitCode  *int     `json:"exitCode,omitempty"`
	Signal    int      `json:"signal,omitempty"` // the signal that killed it
	TimedOut  bool     `json:"timedOut,omitempty"`
	Output    int64    `json:"output"`  // bytes written in all
	Dropped   int64    `json:"dropped"` // bytes no longer in the ring
	StdinOpen bool     `json:"stdinOpen,omitempty"`
}

// Answer is the daemon's answer to a request that is not a stream. Boot
// names the daemon's life: a sandbox started again has another.
type Answer struct {
	Boot      string     `json:"boot,omitempty"`
	Error     string     `json:"error,omitempty"`
	Process   *Record    `json:"process,omitempty"`
	Processes []*Record  `json:"processes,omitempty"`
	Written   int64      `json:"written,omitempty"`
	Context   *Context   `json:"context,omitempty"`
	Contexts  []*Context `json:"contexts,omitempty"`
}

// Frame heads one piece of an output stream; N bytes of data follow a
// stdout or stderr frame. "dropped" says the N bytes before Off are gone;
// "end" carries the process's final record; "ping" keeps a quiet stream's
// connection known to be alive. A line with only Error is a refusal
// instead of a stream.
type Frame struct {
	S     string  `json:"s"`
	Off   int64   `json:"o,omitempty"`
	N     int     `json:"n,omitempty"`
	End   *Record `json:"p,omitempty"`
	Error string  `json:"error,omitempty"`
}
