// Package api is the HTTP face of the service: routes (net/http patterns),
// bearer authentication, JSON in and out, and the one place where error
// kinds become statuses. Handlers hold no policy; they decode, call the
// service (through the small interfaces below, owned here), and encode.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/sandboxd/sandbox/internal/files"
	"github.com/sandboxd/sandbox/wire"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/stats"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/terminal"
	"github.com/sandboxd/sandbox/internal/usage"
	"github.com/sandboxd/sandbox/internal/volumes"
)

// Authenticator resolves a bearer token to a principal.
type Authenticator interface {
	Principal(ctx context.Context, token string) (sandbox.Principal, error)
}

// Leases is what the lease routes need: the lease and its lifecycle.
type Leases interface {
	Lease(ctx context.Context, req service.LeaseRequest) (*sandbox.Sandbox, error)
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context, req service.ListRequest) ([]*sandbox.Sandbox, string, error)
	Renew(ctx context.Context, id string, ttlSec int64) (*sandbox.Sandbox, error)
	SetMetadata(ctx context.Context, id string, m map[string]string) (*sandbox.Sandbox, error)
	SetNetwork(ctx context.Context, id string, p *netpolicy.Policy) (*sandbox.Sandbox, error)
	End(ctx context.Context, id string, purge bool) (*service.EndResult, error)
	Sleep(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Wake(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Fork(ctx context.Context, id string, req service.ForkRequest) (*sandbox.Sandbox, error)
}

// Work is what the exec routes need.
type Work interface {
	// Exec runs a program; with writers its output streams to them.
	Exec(ctx context.Context, id string, req service.ExecRequest, stdout, stderr io.Writer) (*service.ExecResult, error)
	Stop(ctx context.Context, id string) (*service.StopResult, error)
}

// Stats is what the stats route needs (internal/stats).
type Stats interface {
	Stats(ctx context.Context, id string) (*stats.Stats, error)
}

// Files is what the file and archive routes need (internal/files).
type Files interface {
	Archive(ctx context.Context, id, path string, gz bool, head func(full string) io.Writer) error
	Extract(ctx context.Context, id, path string, r io.Reader) (*files.ExtractResult, error)
	Read(ctx context.Context, id, path string, max int64) (*files.ReadResult, error)
	ReadTo(ctx context.Context, id, path string, max int64, open func(files.FileHead) (io.Writer, error)) (*files.ReadResult, error)
	Write(ctx context.Context, id, path string, body io.Reader, size int64) (*files.WriteResult, error)
	Watch(ctx context.Context, id, path string, recursive bool, resume string, ready func(dir, at string) error, emit func(at string, ev files.FileEvent) error) error
}

// Quotas is what the quota, usage and follower routes need (internal/usage).
type Quotas interface {
	QuotaLines(ctx context.Context) ([]quota.Line, error)
	Policy(ctx context.Context) (quota.Policy, error)
	Usage(ctx context.Context) ([]store.Usage, error)
	// Acquire takes a command slot of the caller's org (a follower).
	Acquire(ctx context.Context) (release func(), err error)
}

// Volumes is what the volume routes need (internal/volumes).
type Volumes interface {
	List(ctx context.Context) ([]store.Project, error)
	Delete(ctx context.Context, project string) (*volumes.Result, error)
}

// Operator is what the operator routes need: the per-org quota overrides
// and the API keys.
type Operator interface {
	OrgQuota(ctx context.Context, org string) (quota.Policy, error)
	SetOrgQuota(ctx context.Context, org string, p quota.Policy) error
	Keys(ctx context.Context, org string) ([]store.Key, error)
	MintKey(ctx context.Context, org, subject, scope string, expires time.Time) (string, store.Key, error)
	RevokeKey(ctx context.Context, org, id string) error
}

// Consoles is what the terminal and screen routes need.
type Consoles interface {
	Ticket(ctx context.Context, id, kind string) (string, error)
	Spend(ctx context.Context, token, id, kind string) (context.Context, error)
	Terminal(ctx context.Context, id, arg string, stdin io.Reader, stdout io.Writer, resize <-chan runtime.Size) (int, error)
	Screen(ctx context.Context, id string, stdin io.Reader, stdout, stderr io.Writer) (int, error)
}

// Interpreter is what the interpreter's routes need.
type Interpreter interface {
	Run(ctx context.Context, req interp.Request) (*interp.Result, error)
	Files(ctx context.Context, id string) ([]interp.File, error)
}

var (
	_ Leases      = (*service.Service)(nil)
	_ Quotas      = (*usage.Report)(nil)
	_ Operator    = (*store.Store)(nil)
	_ Work        = (*service.Service)(nil)
	_ Stats       = (*stats.Reader)(nil)
	_ Volumes     = (*volumes.Volumes)(nil)
	_ Consoles    = (*terminal.Consoles)(nil)
	_ Interpreter = (*interp.Interpreter)(nil)
)

// Deps are the parts the handlers call; the first eight are required.
type Deps struct {
	// Version is the server's version, in the OpenAPI document.
	Version     string
	Leases      Leases
	Work        Work
	Files       Files
	Quotas      Quotas
	Operator    Operator
	Consoles    Consoles
	Interpreter Interpreter
	// Ops are the typed ops (POST /v1/sandbox/{op}), the same object the
	// MCP tools call.
	Ops  *ops.Ops
	Auth Authenticator

	// Optional parts.

	// Metrics serves /metrics; nil means no metrics route.
	Metrics http.Handler
	// Sessions are the narrated session logs; nil answers 404 to followers.
	Sessions Sessions
	// Processes are the background process routes; nil serves none.
	Processes Processes
	// Contexts are the code context routes; nil serves none.
	Contexts Contexts
	// Volumes are the volume routes; nil serves none.
	Volumes Volumes
	// Stats is the stats route; nil serves none.
	Stats Stats
	// Images are the image routes; nil serves none.
	Images Images
	// Ports are the port preview routes; nil serves none.
	Ports Ports
	// MCP serves the typed ops as MCP tools at /mcp; it authenticates on
	// its own. Nil means no /mcp.
	MCP http.Handler
	// Keys tells long connections (consoles, event streams) that their
	// key was revoked; nil never ends them for it.
	Keys keywatch.Checker
	// Issuer is the server's own authorization server; nil serves none.
	Issuer Issuer
	// Narrator takes notes into session logs; nil refuses them.
	Narrator Narrator
	// Backend names where sandboxes run ("gvisor", "kube"), and
	// Capabilities what that backend does beyond its core (runtime's
	// names: "checkpoint", "fork", …), for GET /v1/info.
	Backend      string
	Capabilities []string
}

// infoBody is GET /v1/info: what this server is and can do, so that a
// client (and a test) asks for a capability, not for a backend by name.
type infoBody = wire.Info

// Server serves the HTTP API.
type Server struct {
	Deps
	log  *slog.Logger
	mux  *http.ServeMux
	opts Config

	methods  map[string][]string // path pattern → methods, for 405 answers
	docs     []route             // every route, in registration order: the OpenAPI document
	document []byte              // the OpenAPI document, made once
	perKey   keyCounter

	// Console connections outlive their request (the socket is hijacked):
	// Close ends them and waits, so nothing touches the store after it.
	live         sync.WaitGroup
	closing      context.Context
	stopConsoles context.CancelFunc
}

// Config is the API's settings, as an operator sets them.
type Config struct {
	// OperatorOrg is the reserved org whose admin-scoped keys may call
	// the operator routes (every org's quotas and keys, /metrics). Empty
	// means "system".
	OperatorOrg string
	// FrameAncestors is the CSP frame-ancestors source list of the
	// terminal and screen pages; empty means "'self'".
	FrameAncestors string
	// Stall is how long a client may send none of a request body it
	// started, or take none of an answer the server is writing, before its
	// connection is cut; it is also the time a client has to send its
	// headers (http.Server.ReadHeaderTimeout). A silent handler is never
	// cut: an exec computing for ten minutes, or an event stream with no
	// events, waits on nothing of the client's. Zero means DefaultStall.
	Stall time.Duration
}

// Defaults of the zero Config fields.
const (
	DefaultOperatorOrg    = "system"
	DefaultFrameAncestors = "'self'"
	DefaultStall          = 30 * time.Second
)

// RegisterFlags defines the API's flags on fs, writing into o.
func (o *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.OperatorOrg, "operator-org", DefaultOperatorOrg, "the reserved operator org: its admin-scoped keys manage every org's keys and quotas and read /metrics")
	fs.StringVar(&o.FrameAncestors, "frame-ancestors", DefaultFrameAncestors, "who may embed the terminal and screen pages in a frame (a CSP source list, e.g. \"'self' https://app.example.com\")")
	fs.DurationVar(&o.Stall, "stall-timeout", DefaultStall, "how long a client may send no bytes of its headers or a body, or take none of an answer being written, before its connection is cut")
}

// Validate refuses options the API cannot serve.
func (o Config) Validate() error {
	if strings.ContainsAny(o.FrameAncestors, ";,\r\n") {
		return errors.New("--frame-ancestors is one CSP source list: no ';' or ','")
	}
	if o.Stall < 0 || (o.Stall > 0 && o.Stall < 100*time.Millisecond) {
		return fmt.Errorf("--stall-timeout %v: give at least 100ms", o.Stall)
	}
	return nil
}

// StallTimeout is Stall with its default.
func (o Config) StallTimeout() time.Duration {
	if o.Stall == 0 {
		return DefaultStall
	}
	return o.Stall
}

// New builds the handler tree; cfg's zero fields take their defaults.
func New(d Deps, log *slog.Logger, opts Config) *Server {
	if opts.OperatorOrg == "" {
		opts.OperatorOrg = DefaultOperatorOrg
	}
	if opts.FrameAncestors == "" {
		opts.FrameAncestors = DefaultFrameAncestors
	}
	opts.Stall = opts.StallTimeout()
	s := &Server{Deps: d, log: log, mux: http.NewServeMux(), opts: opts}
	s.closing, s.stopConsoles = context.WithCancel(context.Background())
	s.routes()
	doc, err := s.openAPI(d.Version)
	if err != nil {
		panic(err) // a route whose types cannot be described: a bug, found by every test
	}
	s.document = doc
	return s
}

func (s *Server) routes() {
	// /v1/sandboxes is an alias with identical behaviour.
	for _, p := range []string{"/v1/sandbox", "/v1/sandboxes"} {
		s.handle("POST "+p, s.lease, doc{Summary: "Lease a sandbox", Body: typ[service.LeaseRequest](), Answer: typ[sandbox.Object](), Status: 201, Errors: onLease})
		s.handle("GET "+p, s.list, doc{Summary: "The org's sandboxes, newest first, a page at a time", Answer: typ[listBody](),
			Query: []string{"project: only this project's", "status: pending, running, sleeping or error", "limit: 1-1000 a page (default 1000)", "cursor: the last page's next",
				"metadata.KEY: only those whose metadata KEY has this value (any number of keys)"}})
		s.handle("GET "+p+"/usage", s.usage, doc{Summary: "Lease-seconds per class", Answer: typ[usageBody]()})
		s.handle("GET "+p+"/quota", s.quotaLines, doc{Summary: "Each quota of the org with its use", Answer: typ[quotaBody]()})
		s.handle("GET "+p+"/{id}", s.get, doc{Summary: "One sandbox (a sandbox's own credential may read its own)", Answer: typ[sandbox.Object](), Errors: []int{404}, Scope: identity.ScopeRead})
		s.handle("DELETE "+p+"/{id}", s.end, doc{Summary: "End a sandbox: its container goes, its project volume stays unless purge", Answer: typ[service.EndResult](),
			Query: []string{"purge: 1 drops the project volume too"}, Errors: []int{404, 409, 502}})
		s.handle("PUT "+p+"/{id}/network", s.setNetwork, doc{Summary: "Replace the sandbox's egress policy ({} closes it; new connections follow the new policy). A sandbox leased with no network has no interface to open: 409. A policy the backend cannot enforce (on Kubernetes: domain rules without its egress gateway, a name denied inside internet or a CIDR): 501", Body: typ[netpolicy.Policy](), Answer: typ[sandbox.Object](), Errors: []int{400, 403, 404, 409, 501}})
		s.handle("PUT "+p+"/{id}/metadata", s.setMetadata, doc{Summary: "Replace the sandbox's metadata (a string map; {} clears it)", Body: typ[map[string]string](), Answer: typ[sandbox.Object](), Errors: []int{404}})
		s.handle("POST "+p+"/{id}/renew", s.renew, doc{Summary: "Extend the lease (never past the ceiling); the sandbox's credential is handed again, to the new end (a sandbox's own credential may renew itself)", Body: typ[renewRequest](), Answer: typ[sandbox.Object](), Errors: onSandbox, Scope: identity.ScopeRenew})
		s.handle("POST "+p+"/{id}/exec", s.exec, doc{Summary: "Run a command and wait for it; a non-zero exit is a 200. With Accept: application/x-ndjson the answer streams: " +
			`a line per chunk of output as it comes ({"stdout"} or {"stderr"} when UTF-8, else {"stdoutBase64"} / {"stderrBase64"}), then {"exitCode", "timedOut"?, "stopped"?} or {"error"}`,
			Body: typ[service.ExecRequest](), Answer: typ[service.ExecResult](), AnswerRaw: ndjson, Errors: onFiles})
		if s.Stats != nil {
			s.handle("GET "+p+"/{id}/stats", onID(s.Stats.Stats), doc{Summary: "A running sandbox's use now: CPU seconds, memory, processes (by the runtime's count; absent with unavailable where the backend cannot tell) and the disk of its workdir and rootfs",
				Answer: typ[stats.Stats](), Errors: onSandbox})
		}
		s.handle("POST "+p+"/{id}/stop", onID(s.Work.Stop), onIDDoc(s.Work.Stop, "Stop every command running in the sandbox"))
		// One word per concept: sleep and wake; /pause and /resume are
		// their wire-compatible aliases for clients written before.
		s.handle("POST "+p+"/{id}/sleep", onID(s.Leases.Sleep), doc{Summary: "Sleep now (memory kept where the backend can checkpoint: memoryKept says)", Answer: typ[sandbox.Object](), Errors: onSandbox})
		s.handle("POST "+p+"/{id}/wake", onID(s.Leases.Wake), doc{Summary: "Wake now", Answer: typ[sandbox.Object](), Errors: onLease})
		s.handle("POST "+p+"/{id}/pause", onID(s.Leases.Sleep), doc{Summary: "Sleep now: an alias of /sleep", Answer: typ[sandbox.Object](), Errors: onSandbox})
		s.handle("POST "+p+"/{id}/resume", onID(s.Leases.Wake), doc{Summary: "Wake now: an alias of /wake", Answer: typ[sandbox.Object](), Errors: onLease})
		s.handle("POST "+p+"/{id}/fork", s.fork, doc{Summary: "Fork: a new sandbox that goes on from this one's memory and files at this instant (its processes too) while this one runs on; " +
			"a project sandbox's fork needs a new project, which gets a copy of the volume. 501 where the backend cannot checkpoint",
			Body: typ[service.ForkRequest](), Answer: typ[sandbox.Object](), Status: 201, Errors: []int{400, 402, 403, 404, 409, 429, 501, 502, 503}})
		s.handle("GET "+p+"/{id}/fs", s.readFS, doc{Summary: "A file's bytes (streamed), or a directory's entries one per line (X-Sandbox-Kind says which)", AnswerRaw: "application/octet-stream, text/plain",
			Query: []string{"path: under the workdir; empty is the workdir"}, Errors: onFiles})
		s.handle("POST "+p+"/{id}/fs", s.writeFS, doc{Summary: "Write a whole file (the body, streamed); parents are created", BodyRaw: "application/octet-stream",
			Answer: typ[files.WriteResult](), Query: []string{"path: under the workdir"}, Errors: onFiles})
		s.handle("GET "+p+"/{id}/fs/archive", s.archive, doc{Summary: "A directory as a tar, streamed (gzip=1: gzipped)", AnswerRaw: "application/x-tar, application/gzip",
			Query: []string{"path: the directory, under the workdir", "gzip: 1 to gzip the tar"}, Errors: onFiles})
		s.handle("POST "+p+"/{id}/fs/archive", s.extract, doc{Summary: "Extract a tar (or tar.gz) under a directory, streamed; entries that leave it (absolute, '..', links out, devices) refuse the whole archive and nothing is written",
			BodyRaw: "application/x-tar, application/gzip, application/octet-stream", Answer: typ[files.ExtractResult](), Query: []string{"path: the directory to extract under (created)"}, Errors: onFiles})
		s.handle("GET "+p+"/{id}/fs/watch", s.watchFS, doc{Summary: "Changes under a directory as server-sent events while the stream is open (inotify in the sandbox): " +
			"event created, written (a burst of writes, once it settled), removed or renamed, data {\"type\", \"name\"} with the path under the directory; " +
			"overflow: changes were missed (the kernel's queue overflowed, or a resumed stream's events are no longer kept). The first event, ready, says the watch is in place. " +
			"A watch outlives its stream by 30 s: a stream that resumes with Last-Event-ID (an EventSource does by itself) gets the events it missed (the last 1024 are kept), then the live ones; a watch that has ended is begun anew with overflow first. " +
			"501 where the backend has no in-sandbox runner",
			AnswerRaw: "text/event-stream", Query: []string{"path: the directory, under the workdir; empty is the workdir", "recursive: 1 to watch its subdirectories too"}, Errors: append(onFiles, 501)})
		if s.Processes != nil {
			s.processRoutes(p)
		}
		if s.Contexts != nil {
			s.contextRoutes(p)
		}
		if s.Images != nil {
			s.snapshotRoutes(p)
		}
		if s.Ports != nil {
			s.portRoutes(p)
		}
		s.typedOps(p)
		s.consoles(p)
	}
	s.interpreter()
	if s.Images != nil {
		s.imageRoutes()
	}
	s.handle("GET /v1/info", func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, infoBody{Version: s.Version, Backend: s.Backend, Capabilities: append([]string{}, s.Capabilities...)})
		return nil
	}, doc{Summary: "What this server is and what its backend can do beyond the core (a capability absent here answers 501)", Answer: typ[infoBody]()})
	if s.Volumes != nil {
		s.handle("GET /v1/volumes", s.volumes, doc{Summary: "The org's project volumes with size and last use", Answer: typ[volumesBody]()})
		s.handle("DELETE /v1/volumes/{project}", s.deleteVolume, doc{Summary: "Delete a project volume (refused while a live sandbox holds it)", Answer: typ[volumes.Result](), Errors: []int{404, 409, 502}})
	}
	s.handle("GET /v1/orgs/{org}/quota", s.operator(s.orgQuota), doc{Summary: "An org's quota override and effective quotas (an admin key of the operator org)", Answer: typ[orgQuotaBody](), Errors: onOrg})
	s.handle("PUT /v1/orgs/{org}/quota", s.operator(s.setOrgQuota), doc{Summary: "Set an org's quota override (an admin key of the operator org)", Body: typ[quota.Policy](), Answer: typ[orgQuotaBody](), Errors: onOrg})
	s.handle("GET /v1/orgs/{org}/keys", s.keyAdmin(s.listKeys), doc{Summary: "An org's keys with their scopes, never a secret (an admin key of the operator org or of the org itself)", Answer: typ[keysBody](), Errors: onOrg})
	s.handle("POST /v1/orgs/{org}/keys", s.keyAdmin(s.mintKey), doc{Summary: "Mint a key, tenant-scoped unless the body asks for admin; its secret is shown once (an admin key of the operator org or of the org itself)", Body: typ[mintKeyRequest](), Answer: typ[mintedKey](), Status: 201, Errors: onOrg})
	s.handle("DELETE /v1/orgs/{org}/keys/{key}", s.keyAdmin(s.revokeKey), doc{Summary: "Revoke a key at once (an admin key of the operator org or of the org itself)", Answer: typ[revokedBody](), Errors: onOrg})
	s.handle("POST /v1/sessions/{name}/events", s.narrate, doc{Summary: "Append a note to a session's log (its followers see it at once; a sandbox's credential may, with the narrate scope)", Body: typ[narrateRequest](), Answer: typ[narratedBody](), Status: 202, Errors: []int{404}, Scope: identity.ScopeNarrate})
	if s.Issuer != nil {
		s.issuerRoutes()
	}
	s.handle("GET /v1/sessions/{name}/events", s.sessionEvents, doc{Summary: "A session's live log: the backlog, then each event, as server-sent events", AnswerRaw: "text/event-stream",
		Query: []string{"after: resume after this event id (or send Last-Event-ID)"}, Errors: []int{404}})
	if s.MCP != nil {
		for _, m := range []string{"POST", "GET", "DELETE"} {
			s.raw(m+" /mcp", s.perKeyOnly(s.MCP), doc{Summary: "The typed ops as MCP tools (streamable HTTP transport; JSON-RPC as the MCP specification says)",
				BodyRaw: map[string]string{"POST": "application/json"}[m], AnswerRaw: map[string]string{"POST": "application/json", "GET": "text/event-stream", "DELETE": ""}[m],
				Errors: []int{400, 401, 404, 405}})
		}
	}
	if s.Metrics != nil {
		s.raw("GET /metrics", s.authenticate(func(w http.ResponseWriter, r *http.Request) {
			// Metrics add up every tenant: only the operator reads them.
			p, _ := sandbox.PrincipalFrom(r.Context())
			if err := s.operatorOnly(p, "metrics are"); err != nil {
				s.writeError(w, r, err)
				return
			}
			s.Metrics.ServeHTTP(w, r)
		}), doc{Summary: "Prometheus metrics (an admin key of the operator org)", AnswerRaw: "text/plain", Errors: []int{401, 403, 429}})
	}
	s.public("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }, doc{Summary: "The process answers", AnswerRaw: "text/plain"})
	s.public("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.closing.Err() != nil {
			e := sandbox.Errorf(sandbox.KindUnavailable, "draining for a shutdown")
			e.RetryAfter = 1
			s.writeError(w, r, e)
			return
		}
		io.WriteString(w, "ok\n")
	}, doc{Summary: "The server serves (503 while it drains for a shutdown)", AnswerRaw: "text/plain", Errors: []int{503}})
	s.public("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(s.document)
	}, doc{Summary: "This document", AnswerRaw: "application/json"})
	s.notAllowed()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no such route: " + r.Method + " " + r.URL.Path})
	})
}

func (s *Server) handle(pattern string, h func(http.ResponseWriter, *http.Request) error, d doc) {
	s.raw(pattern, s.authenticateScope(d.Scope, func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}), d)
}

// public registers a handler that does its own authentication (or needs
// none).
func (s *Server) public(pattern string, h http.HandlerFunc, d doc) {
	d.Public = true
	s.raw(pattern, h, d)
}

// raw registers h as is, with its document entry, remembering its method
// for the 405 answers.
func (s *Server) raw(pattern string, h http.Handler, d doc) {
	method, path, _ := strings.Cut(pattern, " ")
	if s.methods == nil {
		s.methods = map[string][]string{}
	}
	s.methods[path] = append(s.methods[path], method)
	s.docs = append(s.docs, route{pattern: pattern, doc: d})
	if strings.Contains(d.AnswerRaw, "text/event-stream") {
		h = s.drainable(h)
	}
	s.mux.Handle(pattern, h)
}

// route is one registered pattern and its document entry.
type route struct {
	pattern string
	doc     doc
}

// notAllowed answers the other methods of every registered path with a JSON
// 405 (the mux's own is plain text). Each is registered per method, so it
// never conflicts with a route of another method on a wider pattern.
func (s *Server) notAllowed() {
	for path, allowed := range s.methods {
		allow := strings.Join(allowed, ", ")
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if slices.Contains(allowed, m) {
				continue
			}
			s.mux.HandleFunc(m+" "+path, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Allow", allow)
				writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: r.Method + " is not allowed here; use " + allow})
			})
		}
	}
}

// restartReason is what a connection the drain ends is told.
const restartReason = "the server is restarting; reconnect"

// Drain starts the server's shutdown: /readyz answers 503 (a balancer
// stops sending calls), new streams and consoles are refused with 503 and
// Retry-After, and the open ones end now — an event stream closes (its
// client reconnects after the retry it was given, resuming from its last
// event id), a terminal or screen closes with 1012 (service restart) and
// a reason. Calls in flight go on: the HTTP server's Shutdown waits for
// them. The sandboxes are untouched.
func (s *Server) Drain() { s.stopConsoles() }

// Close drains, then waits for every console connection to end.
func (s *Server) Close() {
	s.Drain()
	s.live.Wait()
}

// drainable ends a long stream when the server drains, and refuses a new
// one once it does.
func (s *Server) drainable(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.closing.Err() != nil {
			e := sandbox.Errorf(sandbox.KindUnavailable, restartReason)
			e.RetryAfter = 1
			s.writeError(w, r, e)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(s.closing, cancel)()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, rc: http.NewResponseController(w), stall: s.opts.Stall}
	s.mux.ServeHTTP(sw, r)
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "dur", time.Since(start))
}

// statusWriter notes the status, and pushes the connection's write
// deadline out before each write (at most once a second): a client that
// takes none of an answer for Config.Stall loses its connection, and the
// handler blocked writing to it returns, freeing what it held (a command
// slot, a runsc exec). The deadline is only ever Stall ahead of a write in
// progress, so a handler silent for longer is not cut when it writes again.
// net/http lifts the deadline after an answer's last flush and on a hijack:
// the next request on the connection, or a console upgraded on it, starts
// without one.
type statusWriter struct {
	http.ResponseWriter
	status   int
	rc       *http.ResponseController
	stall    time.Duration
	extended time.Time
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.Sub(w.extended) >= time.Second {
		w.extended = now
		w.rc.SetWriteDeadline(now.Add(w.stall))
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) authenticate(next http.HandlerFunc) http.Handler {
	return s.authenticateScope("", next)
}

// authenticateScope is authenticate for a route that a sandbox's
// credential may call with scope ("" is none may).
func (s *Server) authenticateScope(scope string, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			s.writeError(w, r, sandbox.Errorf(sandbox.KindUnauthorized, "missing bearer token: send Authorization: Bearer <key>"))
			return
		}
		p, err := s.Auth.Principal(r.Context(), token)
		if err == nil {
			err = confine(p, scope, r)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// One key holds at most maxPerKey requests at once: a client
		// opening connection after connection is refused, not served.
		release, err := s.perKey.admit(token)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer release()
		s.bodyStall(w, r)
		next(w, r.WithContext(sandbox.WithPrincipal(r.Context(), p)))
	})
}

// maxPerKey bounds the open requests (and hence connections) of one key.
const maxPerKey = 256

// admit takes one of key's maxPerKey open requests; past them the
// refusal (429) is the error.
func (c *keyCounter) admit(key string) (release func(), err error) {
	release, ok := c.take(key)
	if !ok {
		e := sandbox.Errorf(sandbox.KindLimit, "more than %d requests of this key are open at once; wait for some to finish", maxPerKey)
		e.RetryAfter = 1
		return nil, e
	}
	return release, nil
}

// bodyStall bounds the wait for r's body (see progressBody), once it is
// admitted.
func (s *Server) bodyStall(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		b := &progressBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: s.opts.Stall}
		b.extend()
		r.Body = b
	}
}

// perKeyOnly bounds a door that authenticates by itself (MCP, whose
// streams are long) to maxPerKey open requests of one bearer, as every
// other door is: a key opening stream after stream is refused (429).
func (s *Server) perKeyOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token, ok := bearer(r.Header.Get("Authorization")); ok {
			release, err := s.perKey.admit(token)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			defer release()
		}
		next.ServeHTTP(w, r)
	})
}

// progressBody pushes the connection's read deadline out on every read of
// the body, and lifts it at the body's end, so that a handler that runs long
// after reading (an exec of ten minutes) is not cut off.
type progressBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	idle     time.Duration // Config.Stall: a body trickled byte by byte holds a connection this long per byte
	extended time.Time
}

// extend pushes the deadline out, at most once a second: an upload of
// 64 MiB is two thousand reads, and one timer reset a second is enough.
func (b *progressBody) extend() {
	if now := time.Now(); now.Sub(b.extended) >= time.Second {
		b.extended = now
		b.rc.SetReadDeadline(now.Add(b.idle))
	}
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.rc.SetReadDeadline(time.Time{})
	case err == nil:
		b.extend()
	}
	// On another error the deadline stays as it is (passed): net/http then
	// gives up the connection instead of waiting to discard the body's rest.
	return n, err
}

// keyCounter counts the open requests of each key (by the key's text: the
// map holds only keys with requests open).
type keyCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *keyCounter) take(key string) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if c.n[key] >= maxPerKey {
		return nil, false
	}
	c.n[key]++
	return func() {
		c.mu.Lock()
		if c.n[key]--; c.n[key] == 0 {
			delete(c.n, key)
		}
		c.mu.Unlock()
	}, true
}

func bearer(h string) (string, bool) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	t := strings.TrimSpace(h[len(prefix):])
	return t, t != "" && len(t) <= maxBearer
}

// maxBearer bounds a bearer: an API key is 47 bytes, a JWT a few KiB.
const maxBearer = 8192

type errorBody struct {
	Error string `json:"error"`
}

// status is THE mapping from error kinds to HTTP statuses.
func status(k sandbox.Kind) int {
	switch k {
	case sandbox.KindInvalid:
		return http.StatusBadRequest
	case sandbox.KindUnauthorized:
		return http.StatusUnauthorized
	case sandbox.KindForbidden:
		return http.StatusForbidden
	case sandbox.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case sandbox.KindTimeout:
		return http.StatusGatewayTimeout
	case sandbox.KindNotFound:
		return http.StatusNotFound
	case sandbox.KindConflict:
		return http.StatusConflict
	case sandbox.KindPayment:
		return http.StatusPaymentRequired
	case sandbox.KindLimit:
		return http.StatusTooManyRequests
	case sandbox.KindUnavailable:
		return http.StatusServiceUnavailable
	case sandbox.KindBadGateway:
		return http.StatusBadGateway
	case sandbox.KindQuota:
		return http.StatusForbidden
	case sandbox.KindUnsupported:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// writeError answers with the error's safe message and logs the detail.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nobody reads the answer
	}
	kind := sandbox.KindOf(err)
	code := status(kind)
	if code >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err, "sandbox", r.PathValue("id"))
	}
	var e *sandbox.Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, code, errorBody{Error: sandbox.Message(err)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// maxJSONBody bounds every JSON request body.
const maxJSONBody = 4 << 20

// decode reads exactly one JSON object into v, refusing unknown fields,
// trailing data and oversized bodies. An empty body is an empty object.
func decode(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, maxJSONBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return sandbox.Errorf(sandbox.KindInvalid, "invalid JSON body: %s", jsonProblem(err))
	}
	if dec.InputOffset() > maxJSONBody {
		return sandbox.Errorf(sandbox.KindInvalid, "JSON body larger than %d bytes", maxJSONBody)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return sandbox.Errorf(sandbox.KindInvalid, "invalid JSON body: one object expected, found more")
	}
	return nil
}

// jsonProblem turns a decoding error into a short, safe sentence.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("field %q must be %s", typ.Field, typ.Type)
		}
		return "must be a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "malformed"
}
