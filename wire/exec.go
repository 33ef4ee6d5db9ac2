package wire

// ExecRequest is the body of POST /v1/sandbox/{id}/exec, and of the typed
// op and MCP tool run (which embed it): Argv wins; else Command runs with
// sh -c. An option added here reaches every door; the backends see it
// through the server's runtime.ExecRequest.
type ExecRequest struct {
	Argv       []string          `json:"argv,omitempty" jsonschema:"program and arguments, run as is; wins over command"`
	Command    string            `json:"command,omitempty" jsonschema:"a shell line, run with sh -c"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text given to the program on its standard input"`
	Dir        string            `json:"dir,omitempty" jsonschema:"working directory, under the sandbox's workdir"`
	TimeoutSec int               `json:"timeoutSec,omitempty" jsonschema:"seconds before the program is killed (exit code 124); 0 means the server's default"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables added for this program"`
	// Session names a live log of the caller's org that the output is
	// appended to as it is produced (narration).
	Session string `json:"session,omitempty" jsonschema:"a session name: the output is appended to that session's live log as it is produced"`
	// Redact lists secrets replaced by "[redacted]" in the narration and in
	// the answer.
	Redact []string `json:"redact,omitempty" jsonschema:"strings replaced by [redacted] in the narration and in the answer"`
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
