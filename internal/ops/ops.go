// Package ops is the typed face of the service for agents: lease, fork,
// run, read, write, stop and end, the background processes (process_start,
// process_list, process_output, process_stdin, process_signal), the
// images (snapshot, images), network, preview_link and run_code, each a function from one JSON object to another, with ids and
// paths in the body. The HTTP routes
// POST /v1/sandbox/{op} and the MCP tools at /mcp both call these, so the
// two doors cannot drift apart; and these call the same service as the
// REST routes, through the Sandboxes, Processes, Images and Interpreter
// interfaces owned here.
// Their inputs embed the service's request types, so an option added there
// reaches both doors with its JSON schema.
//
// No input here names an org or a credential: the org comes from the
// caller's key, in the context, and nothing else.
package ops

import (
	"context"
	"encoding/base64"
	"github.com/sandboxd/sandbox/internal/files"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
)

// Sandboxes is what the typed ops need of the service.
type Sandboxes interface {
	Lease(ctx context.Context, req service.LeaseRequest) (*sandbox.Sandbox, error)
	Renew(ctx context.Context, id string, ttlSec int64) (*sandbox.Sandbox, error)
	Fork(ctx context.Context, id string, req service.ForkRequest) (*sandbox.Sandbox, error)
	Exec(ctx context.Context, id string, req service.ExecRequest, stdout, stderr io.Writer) (*service.ExecResult, error)
	Read(ctx context.Context, id, path string, max int64) (*files.ReadResult, error)
	Write(ctx context.Context, id, path string, body io.Reader, size int64) (*files.WriteResult, error)
	Stop(ctx context.Context, id string) (*service.StopResult, error)
	End(ctx context.Context, id string, purge bool) (*service.EndResult, error)
	SetNetwork(ctx context.Context, id string, p *netpolicy.Policy) (*sandbox.Sandbox, error)
}

// Interpreter runs code (run_code).
type Interpreter interface {
	Run(ctx context.Context, req interp.Request) (*interp.Result, error)
}

var (
	_ Sandboxes   = files.Joined{}
	_ Interpreter = (*interp.Interpreter)(nil)
)

// Ops implements the typed operations.
type Ops struct {
	svc   Sandboxes
	procs Processes
	imgs  Images
	it    Interpreter
	links Previews // nil: no preview_link (WithPreviews)
}

// New returns the typed operations over svc, procs, imgs and it; with
// procs nil the process ops answer that this server runs none, with imgs
// nil the image ops that it keeps no images.
func New(svc Sandboxes, procs Processes, imgs Images, it Interpreter) *Ops {
	return &Ops{svc: svc, procs: procs, imgs: imgs, it: it}
}

// LeaseIn asks for a sandbox (the lease request itself), or with ID to keep
// one.
type LeaseIn struct {
	ID string `json:"id,omitempty" jsonschema:"an existing sandbox of yours to resume and extend instead of leasing a new one"`
	service.LeaseRequest
}

// Lease leases a new sandbox, or with an ID resumes that sandbox (waking it
// when asleep) and extends its lease: the caller's and alive, or an error.
// Its answer is the Sandbox object (an MCP tool's output schema is read
// from the type, so it is the wire type itself).
func (o *Ops) Lease(ctx context.Context, in LeaseIn) (*sandbox.Object, error) {
	var sb *sandbox.Sandbox
	var err error
	switch {
	case in.ID == "":
		sb, err = o.svc.Lease(ctx, in.LeaseRequest)
	case in.Class != "" || in.Project != "" || in.Image != "" || in.Runtime != "":
		return nil, sandbox.Errorf(sandbox.KindInvalid, "with an id, only ttlSec may be given: the sandbox keeps its class, project and image")
	default:
		sb, err = o.svc.Renew(ctx, in.ID, in.TTLSec)
	}
	if err != nil {
		return nil, err
	}
	return sb.Object(), nil
}

// ForkIn asks for a fork of a sandbox: the fork request itself, and the
// sandbox's id.
type ForkIn struct {
	ID string `json:"id" jsonschema:"the running sandbox to fork"`
	service.ForkRequest
}

// Fork leases a new sandbox that goes on from sandbox in.ID's memory and
// files at this instant (its processes too), while in.ID runs on; its
// answer is the new sandbox's object.
func (o *Ops) Fork(ctx context.Context, in ForkIn) (*sandbox.Object, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	sb, err := o.svc.Fork(ctx, in.ID, in.ForkRequest)
	if err != nil {
		return nil, err
	}
	return sb.Object(), nil
}

// RunIn is a command to run in a sandbox: the exec request itself, and the
// sandbox's id.
type RunIn struct {
	ID string `json:"id" jsonschema:"the sandbox to run in"`
	service.ExecRequest
}

// Run runs a command and waits for it; a non-zero exit is a result.
func (o *Ops) Run(ctx context.Context, in RunIn) (*service.ExecResult, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	return o.svc.Exec(ctx, in.ID, in.ExecRequest, nil, nil)
}

// PathIn names a file or directory of a sandbox.
type PathIn struct {
	ID   string `json:"id" jsonschema:"the sandbox"`
	Path string `json:"path,omitempty" jsonschema:"path under the sandbox's workdir; empty means the workdir"`
}

// ReadOut is a file (data when it is UTF-8 text, and always dataBase64) or
// a directory (entries, directories ending in '/').
type ReadOut = wire.ReadResult

// MaxReadBytes bounds a file the typed read answers: its answer carries
// the bytes up to three times (text, base64, and JSON escapes of up to six
// bytes each), so a typed read of a 64 MiB file would cost the server
// hundreds of MiB.
const MaxReadBytes = 4 << 20

// Read reads a file (at most MaxReadBytes) or lists a directory.
func (o *Ops) Read(ctx context.Context, in PathIn) (*ReadOut, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	r, err := o.svc.Read(ctx, in.ID, in.Path, MaxReadBytes)
	if err != nil {
		return nil, err
	}
	out := &ReadOut{Path: r.Path, Woken: r.Woken}
	if r.Dir {
		out.Kind, out.Dir = "directory", true
		out.Entries = r.Entries
		if out.Entries == nil {
			out.Entries = []string{}
		}
		return out, nil
	}
	out.Kind, out.Size = "file", len(r.Data)
	out.DataBase64 = base64.StdEncoding.EncodeToString(r.Data)
	if utf8.Valid(r.Data) {
		s := string(r.Data)
		out.Data = &s
	}
	return out, nil
}

// WriteIn is a file to write: text in data, or bytes in dataBase64.
type WriteIn struct {
	ID         string  `json:"id" jsonschema:"the sandbox"`
	Path       string  `json:"path" jsonschema:"path under the sandbox's workdir; parents are created"`
	Data       *string `json:"data,omitempty" jsonschema:"the content as text"`
	DataBase64 string  `json:"dataBase64,omitempty" jsonschema:"the content as standard base64, for bytes"`
}

// Write writes a whole file, atomically.
func (o *Ops) Write(ctx context.Context, in WriteIn) (*files.WriteResult, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	var data string
	switch {
	case in.Data != nil && in.DataBase64 != "":
		return nil, sandbox.Errorf(sandbox.KindInvalid, "give data or dataBase64, not both")
	case in.Data != nil:
		data = *in.Data
	case in.DataBase64 != "":
		b, err := base64.StdEncoding.DecodeString(in.DataBase64)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "dataBase64 is not standard base64")
		}
		data = string(b)
	}
	return o.svc.Write(ctx, in.ID, in.Path, strings.NewReader(data), int64(len(data)))
}

// IDIn names a sandbox.
type IDIn struct {
	ID string `json:"id" jsonschema:"the sandbox"`
}

// Stop cancels every command running in the sandbox; the sandbox stays.
func (o *Ops) Stop(ctx context.Context, in IDIn) (*service.StopResult, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	return o.svc.Stop(ctx, in.ID)
}

// NetworkIn replaces a sandbox's egress policy.
type NetworkIn struct {
	ID string `json:"id" jsonschema:"the sandbox (leased with a network)"`
	netpolicy.Policy
}

// Network replaces the egress policy of a sandbox leased with one (an
// empty allow list closes it); new connections follow it at once. Its
// answer is the Sandbox object, whose network is what it got.
func (o *Ops) Network(ctx context.Context, in NetworkIn) (*sandbox.Object, error) {
	sb, err := o.svc.SetNetwork(ctx, in.ID, &in.Policy)
	if err != nil {
		return nil, err
	}
	return sb.Object(), nil
}

// EndIn ends a sandbox.
type EndIn struct {
	ID    string `json:"id" jsonschema:"the sandbox"`
	Purge bool   `json:"purge,omitempty" jsonschema:"also delete the project volume"`
}

// End removes the sandbox; its project volume stays unless purge.
func (o *Ops) End(ctx context.Context, in EndIn) (*service.EndResult, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	return o.svc.End(ctx, in.ID, in.Purge)
}

// RunCode runs a program in one of the interpreter's languages.
func (o *Ops) RunCode(ctx context.Context, in interp.Request) (*interp.Result, error) {
	return o.it.Run(ctx, in)
}

func needID(id string) error {
	if id == "" {
		return sandbox.Errorf(sandbox.KindInvalid, "id is required: the sandbox to act on")
	}
	return nil
}
