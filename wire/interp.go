package wire

import "time"

// RunCodeRequest is the body of POST /v1/exec (and of the typed op and MCP
// tool run_code): a program for the code interpreter.
type RunCodeRequest struct {
	Language string `json:"language" jsonschema:"one of py js ts bash r php go rs c cpp java d f90"`
	Code     string `json:"code" jsonschema:"the program's source"`
	// SandboxID is the interpreter's sandbox of an earlier run; the wire
	// has called it session_id since the interpreter's first version.
	SandboxID  string      `json:"session_id,omitempty" jsonschema:"the sandbox of an earlier answer (its session_id), to keep its files; empty starts a new one"`
	Args       []string    `json:"args,omitempty" jsonschema:"arguments given to the program (not to its compiler)"`
	Files      []InputFile `json:"files,omitempty" jsonschema:"files written into the working directory before the run"`
	TimeoutSec int         `json:"timeoutSec,omitempty" jsonschema:"seconds before the run is killed (exit code 124); 0 means the server's default"`
	// Image starts a new sandbox on one of the org's images (a template
	// saved from a sandbox with its dependencies installed, say).
	Image string `json:"image,omitempty" jsonschema:"for a new sandbox: an image of your org's (GET /v1/images) instead of the exec class's"`
	// Context runs the code in a code context of the sandbox instead of
	// a new program: its variables persist between runs.
	Context string `json:"context,omitempty" jsonschema:"py, r, js and bash: run in this code context of the sandbox (default: the language's default context, opened on first use), whose variables, imports and working directory persist between runs; results carries the rich results"`
}

// InputFile is a file placed in the workdir before a run: text in Data,
// or bytes in DataBase64.
type InputFile struct {
	Path       string `json:"path"`
	Data       string `json:"data,omitempty"`
	DataBase64 string `json:"dataBase64,omitempty"`
}

// RunCodeResult is a finished run. SandboxID is the sandbox that ran it:
// the caller's when it still ran, a new one otherwise (NewSandbox says
// so); Files are what this run created or changed. The JSON names
// (session_id, newSession) are the wire's first ones, kept.
type RunCodeResult struct {
	SandboxID  string    `json:"session_id"`
	NewSandbox bool      `json:"newSession,omitempty"`
	ExitCode   int       `json:"exitCode"`
	Stdout     string    `json:"stdout"`
	Stderr     string    `json:"stderr"`
	Files      []RunFile `json:"files"`
	TimedOut   bool      `json:"timedOut,omitempty"`
	Stopped    bool      `json:"stopped,omitempty"`
	// Results are a context run's rich results (a figure as image/png…).
	Results []Result `json:"results,omitempty"`
}

// RunFile is a file of the interpreter's working directory in its sandbox.
type RunFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// SessionFile is the old name of RunFile.
//
// Deprecated: use RunFile.
type SessionFile = RunFile

// Event is one entry of a session log, a named narration log (GET
// /v1/sessions/{name}/events, one per server-sent event's data).
type Event struct {
	Seq  int64     `json:"seq"`
	Kind string    `json:"kind"`
	Text string    `json:"text"`
	At   time.Time `json:"at"`
}
