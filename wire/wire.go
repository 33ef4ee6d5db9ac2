// Package wire is the API's wire types: the bodies the server takes and
// answers, declared once. The server's parts alias them, the Go client
// alias them, and the OpenAPI document is made from them (their json and
// jsonschema tags), so a field the server adds reaches the client and the
// document at once instead of being caught by a run-time check.
//
// The package depends on nothing of the module's, so a program outside it
// can use every type here. Types still declared on the server's side alone
// move here as their routes are touched.
package wire

import (
	"slices"
	"time"
)

// Process is a background process as every door shows it.
type Process struct {
	Pid     int      `json:"pid"`
	Argv    []string `json:"argv"`
	Dir     string   `json:"dir"`
	TTY     bool     `json:"tty,omitempty"`
	Session string   `json:"session,omitempty"`
	// Status is running, exited, or lost (the sandbox started again
	// without its memory: the end is unknown).
	Status    string `json:"status"`
	StartedAt int64  `json:"startedAt"`         // Unix seconds
	EndedAt   int64  `json:"endedAt,omitempty"` // Unix seconds
	ExitCode  *int   `json:"exitCode,omitempty"`
	Signal    string `json:"signal,omitempty"` // what killed it, e.g. SIGKILL (exit code 128+n)
	TimedOut  bool   `json:"timedOut,omitempty"`
	// OutputBytes is all it wrote; DroppedBytes the part no longer kept
	// (the server keeps the last 1 MiB). Both are absent once the sandbox
	// no longer holds the output.
	OutputBytes  int64 `json:"outputBytes"`
	DroppedBytes int64 `json:"droppedBytes"`
	StdinOpen    bool  `json:"stdinOpen,omitempty"`
}

// Running says the process has not ended.
func (p *Process) Running() bool { return p.Status == "running" }

// ProcessRequest is the body of POST /v1/sandbox/{id}/processes, and of
// the typed op and MCP tool process_start: Argv wins; else Command runs
// with sh -c.
type ProcessRequest struct {
	Argv       []string          `json:"argv,omitempty" jsonschema:"program and arguments, run as is; wins over command"`
	Command    string            `json:"command,omitempty" jsonschema:"a shell line, run with sh -c"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text written to the process's stdin at its start; stdin stays open until closed (POST .../stdin?eof=1)"`
	Dir        string            `json:"dir,omitempty" jsonschema:"working directory, under the sandbox's workdir"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables added for this process"`
	TTY        bool              `json:"tty,omitempty" jsonschema:"run it on a terminal (stderr merged into stdout; resizable)"`
	Cols       uint16            `json:"cols,omitempty" jsonschema:"terminal width, with tty"`
	Rows       uint16            `json:"rows,omitempty" jsonschema:"terminal height, with tty"`
	TimeoutSec int               `json:"timeoutSec,omitempty" jsonschema:"seconds before it is killed (exit code 124); 0: it runs until it ends, is signalled or stopped, or the sandbox ends"`
	Session    string            `json:"session,omitempty" jsonschema:"a session name: the process's start and end are narrated into that session's live log"`
}

// Stats is a running sandbox's use now (GET /v1/sandbox/{id}/stats).
type Stats struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
	// CPUSeconds, MemoryBytes and Processes are the runtime's own count;
	// absent, with Unavailable saying why, where the backend cannot tell.
	CPUSeconds  *float64   `json:"cpuSeconds,omitempty"`
	MemoryBytes *int64     `json:"memoryBytes,omitempty"`
	Processes   *int       `json:"processes,omitempty"`
	Unavailable string     `json:"unavailable,omitempty"`
	Disk        []DiskUsed `json:"disk"`
}

// DiskUsed is one filesystem of the sandbox, as df inside sees it.
type DiskUsed struct {
	Path      string `json:"path"`
	UsedBytes int64  `json:"usedBytes"`
	SizeBytes int64  `json:"sizeBytes"`
}

// Image is an image an org may start from: its own and the server's
// ({"image": NAME}), and the class images ({"class": NAME}). Its time is
// Unix seconds; Created converts it.
type Image struct {
	Name string `json:"name"`
	// Digest is the OCI digest of a pulled or snapshot image; a class
	// image, built from Debian by its recipe, has none.
	Digest    string `json:"digest"`
	Source    string `json:"source"` // the reference it was pulled from, "snapshot of sb_…", or how a class image was built
	SizeBytes int64  `json:"sizeBytes"`
	// Scope is org (the caller's org's own: pulled or snapshot), server
	// (the operator's, offered to every org) or class (the image of the
	// class named Class, which every sandbox of that class starts from).
	Scope     string `json:"scope"`
	CreatedAt int64  `json:"createdAt"` // Unix seconds
	// Class and Holds describe a class image: lease it with {"class":
	// Class}; Holds says what is in it.
	Class string `json:"class,omitempty"`
	Holds string `json:"holds,omitempty"`
}

// ImageScopeClass is the Scope of a class image.
const ImageScopeClass = "class"

// Created is CreatedAt as a time.
func (i *Image) Created() time.Time { return time.Unix(i.CreatedAt, 0) }

// PullRequest is the body of POST /v1/images: pull Ref into the org's
// images under Name, from a registry the operator allows.
type PullRequest struct {
	Name     string `json:"name" jsonschema:"the image's name in your org (letters, digits, '.', '_', '-'; up to 64)"`
	Ref      string `json:"ref" jsonschema:"an OCI or Docker image reference, by tag or digest, from a registry the operator allows"`
	Username string `json:"username,omitempty" jsonschema:"registry username, for this pull only (never stored, never in a sandbox)"`
	Password string `json:"password,omitempty" jsonschema:"registry password or token, for this pull only"`
}

// SnapshotRequest is the body of POST /v1/sandbox/{id}/snapshot.
type SnapshotRequest struct {
	Name    string `json:"name" jsonschema:"the new image's name in your org"`
	Workdir bool   `json:"workdir,omitempty" jsonschema:"include the workdir's files too (a project's volume is otherwise not part of an image)"`
}

// ForkRequest is the body of POST /v1/sandbox/{id}/fork, and of the typed
// op and MCP tool fork; every field may be left out but Project for a
// project sandbox.
type ForkRequest struct {
	Project  string            `json:"project,omitempty" jsonschema:"for a project sandbox: the NEW project of the fork, which gets a copy of the volume (a project has one live sandbox)"`
	TTLSec   int64             `json:"ttlSec,omitempty" jsonschema:"the fork's lease length in seconds; defaults to the class's"`
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"the fork's metadata; defaults to the original's"`
}

// Stopped is what a stop did (POST /v1/sandbox/{id}/stop).
type Stopped struct {
	ID      string `json:"id"`
	Stopped int    `json:"stopped"`
}

// Ended is what an end did (DELETE /v1/sandbox/{id}).
type Ended struct {
	ID     string `json:"id"`
	Ended  bool   `json:"ended"`
	Purged bool   `json:"purged"`
}

// Info is GET /v1/info: what a server is and what its backend can do
// beyond the core (lease, exec, files, end).
type Info struct {
	Version string `json:"version"`
	Backend string `json:"backend" jsonschema:"where sandboxes run: gvisor (runsc on the server's machine) or kube (pods on a cluster)"`
	// Capabilities: checkpoint (sleep keeps memory), fork, rootfs-diff
	// (snapshots), stats, network (change a running sandbox's policy),
	// runner (background processes, port previews). An absent one's calls
	// answer 501.
	Capabilities []string `json:"capabilities" jsonschema:"what the backend does beyond the core: checkpoint (sleep keeps memory), fork, rootfs-diff (snapshots), stats, network (change a running sandbox's policy), runner (background processes and port previews); an absent one answers 501"`
}

// Has says whether the server's backend has the capability.
func (i *Info) Has(capability string) bool { return slices.Contains(i.Capabilities, capability) }

// PreviewLink is a minted link: the host form's URL with the token, for a
// browser, the path form's URL (no token) for API clients with a key, and
// when the link stops working.
type PreviewLink struct {
	ID   string `json:"id"`
	Port int    `json:"port"`
	// URL is the host form, http://{port}-sb-{…}.{preview-domain}[:port]/ (the id, "-" for its "_": a DNS name),
	// which serves the app at / (what most apps assume), on an origin of
	// its own: the only form a browser is served.
	URL string `json:"url" jsonschema:"the host form, {port}-sb-{…}.{preview-domain} (the sandbox id with - for its _): the app at /, on an origin of its own; open it in a browser (the first visit sets a cookie and drops the token from the URL)"`
	// PathURL is the path form, under the API's own host. It carries no
	// token: the path form serves API clients with a key only, and sends
	// a browser to the host form.
	PathURL   string `json:"pathUrl" jsonschema:"the path form, /v1/sandbox/{id}/ports/{port}/ on the API's host, without the token: for API clients with a key (Authorization); a browser opening it is sent to the host form"`
	ExpiresAt int64  `json:"expiresAt" jsonschema:"Unix seconds; never past the lease's expiry nor the minting credential's (a token's exp). Ending the sandbox, or revoking the API key that minted it, revokes the link at once"`
}
