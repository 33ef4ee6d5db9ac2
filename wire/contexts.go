package wire

// Code contexts: a Jupyter kernel in a sandbox that keeps its variables,
// imports and working directory between runs (POST
// /v1/sandbox/{id}/contexts, then …/contexts/{ctx}/run).

// ContextRequest is the body of POST /v1/sandbox/{id}/contexts.
type ContextRequest struct {
	Language string            `json:"language" jsonschema:"python (py) or r (Jupyter kernels), javascript (js: node:vm) or bash: what the context runs"`
	Cwd      string            `json:"cwd,omitempty" jsonschema:"the kernel's working directory, under the sandbox's workdir (default: the workdir)"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables added for the kernel"`
}

// CodeContext is a code context as every door shows it.
type CodeContext struct {
	ID       string `json:"id" jsonschema:"the context's id; a language's default context has the language's name"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	// CreatedAt is Unix seconds.
	CreatedAt int64 `json:"createdAt"`
	// Busy says a run is going on in it.
	Busy bool `json:"busy,omitempty"`
}

// ContextsBody is the answer of GET /v1/sandbox/{id}/contexts.
type ContextsBody struct {
	Contexts []CodeContext `json:"contexts"`
}

// ContextRunRequest is the body of POST …/contexts/{ctx}/run.
type ContextRunRequest struct {
	Code       string `json:"code"`
	TimeoutSec int    `json:"timeoutSec,omitempty" jsonschema:"interrupt the run after this long (its state is kept); default 300"`
}

// Result is one rich result of a run: a MIME bundle (text/plain,
// text/html, text/markdown, text/latex, image/png and image/jpeg as
// base64, image/svg+xml, application/json as JSON), and whether it is the
// value of the run's last expression.
type Result struct {
	Data         map[string]any `json:"data"`
	IsMainResult bool           `json:"isMainResult,omitempty"`
}

// ExecutionError is a run's error: its exception's name, value and the
// traceback's lines (without colour codes). A run past its timeout is a
// TimeoutError.
type ExecutionError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// Logs are a run's output streams, chunk by chunk as they came.
type Logs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// Execution is the answer of a run as JSON.
type Execution struct {
	Results        []Result        `json:"results"`
	Logs           Logs            `json:"logs"`
	Error          *ExecutionError `json:"error,omitempty"`
	ExecutionCount int             `json:"executionCount,omitempty"`
	TimedOut       bool            `json:"timedOut,omitempty"`
}

// ContextEvent is one line of a run's answer as NDJSON (Accept:
// application/x-ndjson): "stdout" and "stderr" with text, "result" with
// data and isMainResult, "error" with error, and last "end" with
// executionCount and timedOut.
type ContextEvent struct {
	Type           string          `json:"type"`
	Text           string          `json:"text,omitempty"`
	Data           map[string]any  `json:"data,omitempty"`
	IsMainResult   bool            `json:"isMainResult,omitempty"`
	Error          *ExecutionError `json:"error,omitempty"`
	ExecutionCount int             `json:"executionCount,omitempty"`
	TimedOut       bool            `json:"timedOut,omitempty"`
}
