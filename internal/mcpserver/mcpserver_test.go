package mcpserver_test

import (
	"context"
	"encoding/json"
	"github.com/sandboxd/sandbox/internal/files"
	"github.com/sandboxd/sandbox/internal/processes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

// The SDK runs a goroutine per session and stream, and keywatch one per
// request: each must end with its session.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is the MCP handler over the typed ops, the real service, a real
// SQLite store (which also resolves the bearer keys) and the fake runtime,
// served by a real HTTP server.
type env struct {
	url  string
	st   *store.Store
	rt   *fake.Runtime
	keys map[string]string
	tr   *http.Transport
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	svc := service.New(service.Config{StartTimeout: 5 * time.Second, ExecTimeout: 5 * time.Second},
		service.Deps{Store: st, Runtime: rt, Quotas: st})
	h := mcpserver.New(ops.New(files.Join(svc, files.New(svc, 0, 0)), processes.New(svc, st, rt, nil, nil, "fake", nil, nil), nil, nil), st, slog.New(slog.DiscardHandler), "test")
	srv := httptest.NewServer(h)
	// A transport of the test's own, whose idle connections (and their
	// goroutines) are closed with it; cleanups run last-in first-out, so
	// the server closes after the client's connections.
	tr := &http.Transport{}
	t.Cleanup(srv.Close)
	t.Cleanup(tr.CloseIdleConnections)
	e := &env{url: srv.URL, st: st, rt: rt, keys: map[string]string{}, tr: tr}
	for _, org := range []string{"acme", "globex"} {
		if e.keys[org], err = st.CreateKey(ctx, org, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// bearer adds a key to every request of an MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return b.next.RoundTrip(r)
}

// connect opens an MCP session of the official SDK's client with key,
// closed when the test ends.
func (e *env) connect(t *testing.T, key string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "sandbox-test", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   e.url,
		HTTPClient: &http.Client{Transport: bearer{key: key, next: e.tr}},
		MaxRetries: -1,
	}, nil)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func (e *env) session(t *testing.T, org string) *mcp.ClientSession {
	t.Helper()
	s, err := e.connect(t, e.keys[org])
	if err != nil {
		t.Fatalf("connect as %s: %v", org, err)
	}
	return s
}

// call calls a tool and answers its structured result, or the text of a
// tool error.
func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (map[string]any, string) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		// A failed run's zero result would read like success to a model.
		if res.StructuredContent != nil {
			t.Errorf("%s failed with a structured result beside the error: %v", name, res.StructuredContent)
		}
		return nil, res.Content[0].(*mcp.TextContent).Text
	}
	var m map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: structured result %s: %v", name, b, err)
	}
	return m, ""
}

func TestToolsListed(t *testing.T) {
	e := newEnv(t)
	s := e.session(t, "acme")
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	for _, name := range []string{"lease", "fork", "run", "read", "write", "stop", "end", "network", "preview_link",
		"process_start", "process_list", "process_output", "process_stdin", "process_signal", "snapshot", "images", "run_code"} {
		tool := tools[name]
		if tool == nil {
			t.Errorf("no tool %s", name)
			continue
		}
		if tool.Description == "" {
			t.Errorf("%s: no description", name)
		}
		// Every input is a JSON object; none may hold an org or a key, which
		// come from the bearer key only.
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(b, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s: input schema %s", name, b)
		}
		for p := range schema.Properties {
			if l := strings.ToLower(p); l == "org" || strings.Contains(l, "key") || strings.Contains(l, "token") {
				t.Errorf("%s: input property %q names a tenant or credential", name, p)
			}
		}
	}
	// The ops on a sandbox name it by id in their schema.
	for _, name := range []string{"run", "read", "write", "stop", "end"} {
		b, _ := json.Marshal(tools[name].InputSchema)
		if !strings.Contains(string(b), `"id"`) {
			t.Errorf("%s: input schema without id: %s", name, b)
		}
	}
}

func TestLeaseRunEnd(t *testing.T) {
	e := newEnv(t)
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if strings.Join(req.Argv, " ") == "echo hi" {
			io.WriteString(req.Stdout, "hi\n")
			return &runtime.ExitError{Code: 2}
		}
		return nil
	})
	s := e.session(t, "acme")
	sb, msg := call(t, s, "lease", map[string]any{})
	if msg != "" {
		t.Fatal(msg)
	}
	id, _ := sb["id"].(string)
	if id == "" || sb["org"] != "acme" || sb["status"] != "running" {
		t.Fatalf("lease answered %v", sb)
	}
	if len(e.rt.Objects()) != 1 {
		t.Fatalf("runtime objects %v, want the one leased", e.rt.Objects())
	}
	res, msg := call(t, s, "run", map[string]any{"id": id, "argv": []string{"echo", "hi"}})
	if msg != "" {
		t.Fatal(msg)
	}
	// A non-zero exit is a result, not a tool error.
	if res["stdout"] != "hi\n" || res["exitCode"] != float64(2) {
		t.Fatalf("run answered %v", res)
	}

	// Another org's key sees acme's sandbox as unknown.
	other := e.session(t, "globex")
	if _, msg := call(t, other, "run", map[string]any{"id": id, "command": "true"}); msg != "not_found: sandbox not found" {
		t.Fatalf("globex's run of acme's sandbox: %q", msg)
	}
	if _, msg := call(t, other, "end", map[string]any{"id": id}); !strings.HasPrefix(msg, "not_found:") {
		t.Fatalf("globex's end of acme's sandbox: %q", msg)
	}
	// The SDK checks the input against the schema (id is required); the
	// op's own validation answers an empty id, as a tool error of its kind.
	if _, msg := call(t, s, "run", map[string]any{"command": "true"}); !strings.Contains(msg, "id") {
		t.Fatalf("run without id: %q", msg)
	}
	if _, msg := call(t, s, "run", map[string]any{"id": "", "command": "true"}); !strings.HasPrefix(msg, "invalid: id is required") {
		t.Fatalf("run with an empty id: %q", msg)
	}

	end, msg := call(t, s, "end", map[string]any{"id": id})
	if msg != "" {
		t.Fatal(msg)
	}
	if end["ended"] != true {
		t.Fatalf("end answered %v", end)
	}
	if objs := e.rt.Objects(); len(objs) != 0 {
		t.Fatalf("runtime objects after end: %v", objs)
	}
}

func TestUnauthenticatedRefused(t *testing.T) {
	e := newEnv(t)
	// The SDK's client cannot even initialize without a working key.
	for name, key := range map[string]string{"no key": "", "unknown key": "sbk_" + strings.Repeat("a", 52)} {
		if s, err := e.connect(t, key); err == nil {
			s.Close()
			t.Fatalf("%s: connected", name)
		}
	}
	// On the wire: 401 with the bearer challenge, before any MCP.
	for name, auth := range map[string]string{"no key": "", "unknown key": "Bearer sbk_" + strings.Repeat("a", 52)} {
		req, _ := http.NewRequest("POST", e.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := (&http.Client{Transport: e.tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
}

func TestRevokedKeyRefusedMidSession(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	secret, k, err := e.st.MintKey(ctx, "acme", "test", store.ScopeTenant, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.connect(t, secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.st.RevokeKey(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	// The server keeps the session (and its goroutine) until its 30-minute
	// idle timeout: the client gives up on it once refused, and a DELETE
	// with a revoked key is refused too. To let goleak see it gone, make the
	// key again at the end and delete the session as a client would.
	id := s.ID()
	t.Cleanup(func() {
		if _, _, err := e.st.EnsureKey(ctx, "acme", "test", store.ScopeTenant, secret); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("DELETE", e.url, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Mcp-Session-Id", id)
		resp, err := (&http.Client{Transport: e.tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	})
	// The key is asked again on every request: the session's next call is
	// refused.
	if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "lease", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a revoked key's session still calls tools")
	}
	if objs := e.rt.Objects(); len(objs) != 0 {
		t.Fatalf("a revoked key leased %v", objs)
	}
}

// An org that opens session after session keeps at most MaxSessions of
// them: past it its least recently used one is closed (its next call
// fails), and another org's session is not touched.
func TestSessionsBoundedPerOrg(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	other := e.session(t, "globex")
	var mine []*mcp.ClientSession
	for range mcpserver.MaxSessions {
		mine = append(mine, e.session(t, "acme"))
	}
	// The first is used again: the second is now the least recently used.
	if _, err := mine[0].ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e.session(t, "acme")
	if _, err := mine[1].ListTools(ctx, nil); err == nil {
		t.Fatal("an org holds more than MaxSessions sessions: its least recently used one still answers")
	}
	for i, s := range append([]*mcp.ClientSession{other, mine[0]}, mine[2:]...) {
		if _, err := s.ListTools(ctx, nil); err != nil {
			t.Fatalf("session %d closed: %v", i, err)
		}
	}
}
