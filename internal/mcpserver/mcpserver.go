// Package mcpserver serves the typed ops as MCP tools over the streamable
// HTTP transport, with the official Go SDK. It is a second door onto
// internal/ops: same operations, same bearer keys, same org scoping.
//
// A tool's input names sandboxes and paths only. The org is the caller's
// key's, read from the request by the SDK's bearer middleware on every
// call; no schema has a field a model could fill with an org or a key.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Authenticator resolves a bearer key to a principal, and says later
// whether the key still works (an open MCP stream ends when it does not).
type Authenticator interface {
	Principal(ctx context.Context, token string) (sandbox.Principal, error)
	keywatch.Checker
}

const principalKey = "principal"

// New returns the /mcp handler.
func New(o *ops.Ops, authn Authenticator, log *slog.Logger, version string) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "sandbox", Version: version}, &mcp.ServerOptions{
		Instructions: "Lease an isolated sandbox, run commands in it, read and write its files, stop its work and end it. " +
			"fork copies a running sandbox, memory and all. process_start runs a command in the background (process_output reads its output, process_stdin feeds it, process_signal stops it); preview_link makes a browser link to a server it runs. " +
			"snapshot saves a sandbox's files as an image that later leases and run_code sandboxes start from (images lists them). " +
			"run_code runs a program in one of " + fmt.Sprint(interp.Names()) + " in a sandbox that keeps its files.",
		Logger: log,
	})
	add(s, "lease", "Lease a sandbox (class exec by default), or pass the id of one of yours to resume it and extend its lease.", o.Lease)
	add(s, "fork", "Fork a running sandbox: a new sandbox that goes on from its memory and files at this instant (its running processes too) while the original runs on. "+
		"A project sandbox's fork needs a new project, which gets a copy of the volume.", o.Fork)
	add(s, "run", "Run a command in a sandbox and wait for it. A non-zero exit is a result, not an error.", o.Run)
	add(s, "read", "Read a file (text in data when it is UTF-8, always dataBase64) or list a directory of a sandbox.", o.Read)
	add(s, "write", "Write a whole file in a sandbox (data for text, dataBase64 for bytes); parents are created.", o.Write)
	add(s, "stop", "Stop every command running in a sandbox; the sandbox and its files stay.", o.Stop)
	add(s, "end", "End a sandbox: it is removed; its project volume stays unless purge.", o.End)
	add(s, "process_start", "Start a background process in a sandbox (a server, a watcher, a long build) and answer at once with its pid: "+
		"it runs on after the call; its output is kept (the last 1 MiB) for process_output.", o.ProcessStart)
	add(s, "network", "Replace the egress policy of a sandbox leased with a network: allow lists what it may reach (\"internet\", a domain, *.domain, an IPv4 CIDR), "+
		"deny what it may not even so, ports the destination ports; an empty allow closes it. The server's operator bounds what may be allowed; "+
		"the answer's network is what the sandbox got. (lease takes the same policy as network.)", o.Network)
	add(s, "preview_link", "Mint a link that opens a web server running in a sandbox (listening on port, on its own loopback) in a browser with no key: "+
		"url is the host form (the app at /, on its own origin): the URL to open in a browser; pathUrl is the path form, for requests with a key only. It works until expiresAt (ttlSec, default an hour, never past the lease) or until the sandbox ends or the key that minted it is revoked; "+
		"whoever holds it opens that port, so hand it only to whom should see the app.", o.PreviewLink)
	add(s, "process_list", "List a sandbox's background processes, running and finished, with their status and exit codes.", o.ProcessList)
	add(s, "process_output", "Read what a background process wrote after the offset from (0: all that is kept), without waiting; "+
		"pass the answer's next as from to read only what came since.", o.ProcessOutput)
	add(s, "process_stdin", "Write text to a background process's stdin; eof closes it.", o.ProcessStdin)
	add(s, "process_signal", "Send a signal (TERM by default; INT, KILL, HUP, ...) to a background process and its group.", o.ProcessSignal)
	add(s, "snapshot", "Save a sandbox's filesystem as an image of your org under name: what it changed in its root (packages installed, files written outside the workdir) "+
		"and, with workdir, its workdir. A lease or run_code with {\"image\": name} then starts from it. Memory and running processes are not saved (fork copies those).", o.Snapshot)
	add(s, "images", "List the images your org may lease with {\"image\": name}: its own (scope org: snapshots and pulls), then the server's (scope server).", o.ListImages)
	add(s, "run_code", "Run a program in one of the interpreter's languages. Pass session_id again to keep the files of earlier runs; "+
		"an answer with a different session_id (the sandbox's id) means the old sandbox ended.", o.RunCode)

	// Sessions hold no state of ours; an idle one is dropped after a while
	// (the client starts a new one) so abandoned sessions do not pile up.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: 30 * time.Minute})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		p, err := authn.Principal(ctx, token)
		if err != nil {
			if sandbox.KindOf(err) == sandbox.KindUnauthorized {
				return nil, fmt.Errorf("%w: %s", auth.ErrInvalidToken, sandbox.Message(err))
			}
			// The SDK writes this error's text to the client: keep the
			// detail in the log.
			log.Error("mcp: checking a key", "err", err)
			return nil, errors.New("the key could not be checked; try again")
		}
		if p.Confined() {
			return nil, fmt.Errorf("%w: a sandbox's credential cannot use the MCP tools", auth.ErrInvalidToken)
		}
		// UserID binds an MCP session to the org that opened it: the SDK
		// refuses the session's id presented with another org's key.
		return &auth.TokenInfo{UserID: p.Org, Extra: map[string]any{principalKey: p}}, nil
	}
	live := &sessions{srv: s, max: maxSessions, byOrg: map[string]map[string]time.Time{}}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(live.bound(watchKey(sameAsUnknown(h), authn)))
}

// maxSessions bounds the MCP sessions one org keeps open. The SDK keeps a
// session (its connection's goroutines and buffers) until its client
// deletes it or it idles for the SessionTimeout: a client that opened them
// in a loop would hold the memory all orgs share. Past the bound the org's
// least recently used session is closed; its client's next request is the
// SDK's 404, on which the transport's clients start a new session.
const maxSessions = 64

// sessions counts each org's open MCP sessions by the ids the SDK gave
// them (the Mcp-Session-Id of the answer to a request without one).
type sessions struct {
	srv   *mcp.Server
	max   int
	mu    sync.Mutex
	byOrg map[string]map[string]time.Time // org → session id → its last request
}

func (c *sessions) bound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil || ti.UserID == "" {
			h.ServeHTTP(w, r)
			return
		}
		org := ti.UserID
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			c.touch(org, id, false)
			h.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost {
			c.makeRoom(org)
		}
		h.ServeHTTP(w, r)
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			c.touch(org, id, true)
		}
	})
}

// touch notes a request of org's session id. Only the answer that opened
// the session adds it: an id org did not open (another org's, which the
// SDK answers 404) is not counted as org's.
func (c *sessions) touch(org, id string, opened bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byOrg[org]
	if _, ok := m[id]; !ok && !opened {
		return
	}
	if m == nil {
		m = map[string]time.Time{}
		c.byOrg[org] = m
	}
	m[id] = time.Now()
}

// makeRoom closes org's least recently used sessions until a new one is
// within the bound, after forgetting those the SDK has closed by itself
// (a client's DELETE, the idle timeout).
func (c *sessions) makeRoom(org string) {
	c.mu.Lock()
	m := c.byOrg[org]
	if len(m) < c.max {
		c.mu.Unlock()
		return
	}
	open := map[string]*mcp.ServerSession{}
	for ss := range c.srv.Sessions() {
		open[ss.ID()] = ss
	}
	var closing []*mcp.ServerSession
	for id := range m {
		if open[id] == nil {
			delete(m, id)
		}
	}
	for len(m) >= c.max {
		oldest, at := "", time.Time{}
		for id, t := range m {
			if oldest == "" || t.Before(at) {
				oldest, at = id, t
			}
		}
		delete(m, oldest)
		closing = append(closing, open[oldest])
	}
	c.mu.Unlock()
	// Closed outside the lock: the SDK's close takes its own.
	for _, ss := range closing {
		ss.Close()
	}
}

// watchKey ends a request (an MCP stream can be long) once the key that
// opened it is revoked. The SDK checks the key again on every request.
func watchKey(h http.Handler, c keywatch.Checker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if ti := auth.TokenInfoFromContext(ctx); ti != nil {
			if p, ok := ti.Extra[principalKey].(sandbox.Principal); ok {
				wctx, stop := keywatch.Watch(sandbox.WithPrincipal(ctx, p), c)
				defer stop()
				ctx = wctx
			}
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// sameAsUnknown answers another org's session id exactly like an unknown
// one: the SDK says 403 "session user mismatch", which tells the caller the
// session exists (a cross-tenant fact); this turns it into the SDK's own
// 404 "session not found".
func sameAsUnknown(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") == "" {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&mismatchWriter{ResponseWriter: w}, r)
	})
}

// mismatchWriter holds back a 403 until its body shows whether it is the
// SDK's session mismatch.
type mismatchWriter struct {
	http.ResponseWriter
	held bool
}

const mismatch = "session user mismatch\n"

func (m *mismatchWriter) WriteHeader(code int) {
	if code == http.StatusForbidden {
		m.held = true
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *mismatchWriter) Write(p []byte) (int, error) {
	if !m.held {
		return m.ResponseWriter.Write(p)
	}
	m.held = false
	if string(p) == mismatch {
		m.ResponseWriter.WriteHeader(http.StatusNotFound)
		m.ResponseWriter.Write([]byte("session not found\n"))
		return len(p), nil
	}
	m.ResponseWriter.WriteHeader(http.StatusForbidden)
	return m.ResponseWriter.Write(p)
}

// FlushError flushes through whatever wraps the connection below (the API's
// status recorder unwraps, it does not flush).
func (m *mismatchWriter) FlushError() error {
	return http.NewResponseController(m.ResponseWriter).Flush()
}

func (m *mismatchWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// add registers one typed op as a tool. Its errors become tool errors (the
// model reads them) with the same safe message the HTTP API sends, and no
// structured result: a failed run's zero {"exitCode":0} would read like
// success to a model. (The SDK marshals Out into the result whenever the
// handler returns no error; an error it turns into IsError and a text.)
func add[In, Out any](s *mcp.Server, name, desc string, f func(context.Context, In) (Out, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc}, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		p, ok := principal(req)
		if !ok {
			return nil, zero, failure(sandbox.Errorf(sandbox.KindUnauthorized, "no principal"))
		}
		out, err := f(sandbox.WithPrincipal(ctx, p), in)
		if err != nil {
			return nil, zero, failure(err)
		}
		return nil, out, nil
	})
}

func principal(req *mcp.CallToolRequest) (sandbox.Principal, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return sandbox.Principal{}, false
	}
	p, ok := req.Extra.TokenInfo.Extra[principalKey].(sandbox.Principal)
	return p, ok && p.Org != ""
}

// failure is a tool error's text: "<kind>: <safe message>", e.g.
// "not_found: sandbox not found" for another org's id, exactly as for an
// unknown one.
func failure(err error) error {
	kind := sandbox.KindOf(err)
	if errors.Is(err, context.Canceled) {
		kind = sandbox.KindUnavailable
	}
	return errors.New(kind.String() + ": " + sandbox.Message(err))
}
