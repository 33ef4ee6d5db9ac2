package integration_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/server"
)

// TestTypedOps drives lease, run, read, write, stop and end over
// POST /v1/sandbox/{op}, with ids and paths in the body.
func TestTypedOps(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		sb := e.must(http.StatusOK, "POST", "/v1/sandbox/lease", "acme", map[string]any{"ttlSec": 120}).JSON(t)
		id := sb["id"].(string)
		e.must(http.StatusOK, "POST", "/v1/sandbox/write", "acme", map[string]any{"id": id, "path": "a/t.txt", "data": "héllo"})
		e.must(http.StatusOK, "POST", "/v1/sandboxes/write", "acme", map[string]any{"id": id, "path": "b.bin", "dataBase64": "AA3/"})
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/write", "acme", map[string]any{"id": id, "path": "x", "data": "a", "dataBase64": "YQ=="})
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/write", "acme", map[string]any{"id": id, "path": "../x", "data": "a"})

		txt := e.must(http.StatusOK, "POST", "/v1/sandbox/read", "acme", map[string]any{"id": id, "path": "a/t.txt"}).JSON(t)
		if txt["kind"] != "file" || txt["data"] != "héllo" || txt["dataBase64"] != base64.StdEncoding.EncodeToString([]byte("héllo")) {
			t.Errorf("read text: %v", txt)
		}
		bin := e.must(http.StatusOK, "POST", "/v1/sandbox/read", "acme", map[string]any{"id": id, "path": "b.bin"}).JSON(t)
		if _, has := bin["data"]; has || bin["dataBase64"] != "AA3/" {
			t.Errorf("read bytes (not UTF-8: no data, only dataBase64): %v", bin)
		}
		dir := e.must(http.StatusOK, "POST", "/v1/sandbox/read", "acme", map[string]any{"id": id}).JSON(t)
		if dir["kind"] != "directory" || !strings.Contains(mustJSON(dir["entries"]), `"a/"`) {
			t.Errorf("read dir: %v", dir)
		}

		run := e.must(http.StatusOK, "POST", "/v1/sandbox/run", "acme", map[string]any{"id": id, "argv": []string{"sh", "-c", "cat a/t.txt; exit 4"}}).JSON(t)
		if run["stdout"] != "héllo" || run["exitCode"] != float64(4) {
			t.Errorf("run: %v", run)
		}
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/run", "acme", map[string]any{"command": "true"})

		// lease with an id resumes and extends; another org's id is a 404.
		again := e.must(http.StatusOK, "POST", "/v1/sandbox/lease", "acme", map[string]any{"id": id, "ttlSec": 600}).JSON(t)
		if again["id"] != id || again["expiresAt"] == sb["expiresAt"] {
			t.Errorf("lease with id: %v (was %v)", again, sb)
		}
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/lease", "acme", map[string]any{"id": id, "class": "dev"})
		for op, body := range opBodies(id) {
			e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+op, "globex", body)
		}
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/run", "acme", map[string]any{"id": id, "command": "true", "org": "globex"})

		// stop cancels a running command; end removes the sandbox.
		done := make(chan map[string]any)
		go func() {
			done <- e.do("POST", "/v1/sandbox/run", "acme", map[string]any{"id": id, "command": "sleep 60"}).JSON(t)
		}()
		var stopped map[string]any
		for range 50 {
			time.Sleep(100 * time.Millisecond)
			stopped = e.must(http.StatusOK, "POST", "/v1/sandbox/stop", "acme", map[string]any{"id": id}).JSON(t)
			if stopped["stopped"] == float64(1) {
				break
			}
		}
		if r := <-done; r["stopped"] != true || stopped["stopped"] != float64(1) {
			t.Errorf("stop: %v, run: %v", stopped, r)
		}
		e.must(http.StatusOK, "POST", "/v1/sandbox/end", "acme", map[string]any{"id": id})
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/read", "acme", map[string]any{"id": id})
	})
}

// opBodies is a valid body of each typed op on sandbox id.
func opBodies(id string) map[string]map[string]any {
	return map[string]map[string]any{
		"lease": {"id": id}, "run": {"id": id, "command": "true"}, "read": {"id": id, "path": "notes/n.txt"},
		"write": {"id": id, "path": "x", "data": "x"}, "stop": {"id": id}, "end": {"id": id},
		"process_start": {"id": id, "argv": []string{"true"}}, "process_list": {"id": id}, "process_output": {"id": id, "pid": 1},
		"process_stdin": {"id": id, "pid": 1, "text": "x"}, "process_signal": {"id": id, "pid": 1}, "fork": {"id": id},
		"snapshot": {"id": id, "name": "stolen"}, "preview_link": {"id": id, "port": 8000}, "network": {"id": id, "allow": []string{}},
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// bearer adds a key to every request of an MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

func (e *env) mcpSession(ctx context.Context, org string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "sandbox-test", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   e.http.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key: e.keys[org], next: http.DefaultTransport}},
	}, nil)
}

// call calls a tool and returns its structured result, or the error text
// of a tool error.
func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (map[string]any, string) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		if res.StructuredContent != nil {
			t.Errorf("%s failed with a structured result beside the error, which reads like success: %v", name, res.StructuredContent)
		}
		return nil, res.Content[0].(*mcp.TextContent).Text
	}
	m, _ := res.StructuredContent.(map[string]any)
	if m == nil {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &m)
	}
	return m, ""
}

// TestMCP: a client built with the official SDK connects over HTTP, lists
// the tools, and leases, runs, reads, writes, stops and ends; another org's
// key sees not_found, and no tool's schema can name an org or a credential.
func TestMCP(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		s, err := e.mcpSession(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		tools, err := s.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range tools.Tools {
			names = append(names, tool.Name)
			schema := strings.ToLower(mustJSON(tool.InputSchema))
			for _, bad := range []string{"org", "key", "token", "credential", "auth", "bearer", "tenant"} {
				if strings.Contains(schema, `"`+bad) {
					t.Errorf("tool %s: input schema can name %q: %s", tool.Name, bad, schema)
				}
			}
			if !strings.Contains(schema, `"additionalproperties":false`) {
				t.Errorf("tool %s: input schema accepts unknown fields: %s", tool.Name, schema)
			}
		}
		if got := strings.Join(names, ","); !strings.Contains(","+got+",", ",lease,") || !strings.Contains(","+got+",", ",process_output,") || !strings.Contains(","+got+",", ",fork,") ||
			!strings.Contains(","+got+",", ",snapshot,") || !strings.Contains(","+got+",", ",images,") || !strings.Contains(","+got+",", ",preview_link,") || !strings.Contains(","+got+",", ",network,") || len(names) != 17 {
			t.Fatalf("tools: %s", got)
		}

		sb, msg := call(t, s, "lease", map[string]any{"ttlSec": 300})
		id, _ := sb["id"].(string)
		if id == "" {
			t.Fatalf("lease: %v %s", sb, msg)
		}
		if w, msg := call(t, s, "write", map[string]any{"id": id, "path": "notes/n.txt", "data": "from mcp"}); w["bytes"] != float64(8) {
			t.Fatalf("write: %v %s", w, msg)
		}
		if r, msg := call(t, s, "read", map[string]any{"id": id, "path": "notes/n.txt"}); r["data"] != "from mcp" {
			t.Fatalf("read: %v %s", r, msg)
		}
		if r, msg := call(t, s, "run", map[string]any{"id": id, "command": "wc -c < notes/n.txt; exit 2"}); r["stdout"] != "8\n" || r["exitCode"] != float64(2) {
			t.Fatalf("run: %v %s", r, msg)
		}
		if r, msg := call(t, s, "run_code", map[string]any{"language": "py", "code": "print(6*7)"}); r["stdout"] != "42\n" {
			t.Fatalf("run_code: %v %s", r, msg)
		}
		// In a code context: the variables stay for the session's next run,
		// and the value of the last expression comes back as a result.
		first, msg := call(t, s, "run_code", map[string]any{"language": "py", "code": "x = 21", "context": "default"})
		sess, _ := first["session_id"].(string)
		r, msg2 := call(t, s, "run_code", map[string]any{"language": "py", "code": "x * 2", "context": "default", "session_id": sess})
		if results, _ := r["results"].([]any); sess == "" || r["stdout"] != "42\n" || len(results) != 1 {
			t.Errorf("run_code in a context: %v %s / %v %s", first, msg, r, msg2)
		}
		if _, msg := call(t, s, "read", map[string]any{"id": id, "path": "/etc/passwd"}); !strings.HasPrefix(msg, "invalid:") {
			t.Errorf("read outside the workdir: %q", msg)
		}
		if _, msg := call(t, s, "run", map[string]any{"id": id, "command": "true", "org": "globex"}); msg == "" {
			t.Errorf("a tool accepted an org argument")
		}

		// Another org, over its own MCP session: not found, like an unknown id.
		g, err := e.mcpSession(ctx, "globex")
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for op, body := range opBodies(id) {
			_, msg := call(t, g, op, body)
			if msg != "not_found: sandbox not found" {
				t.Errorf("globex %s on acme's sandbox: %q", op, msg)
			}
		}

		// Another org's key on acme's MCP session id: answered exactly like a
		// session id that does not exist (the SDK's own 403 would say it does).
		post := func(org, session string) (int, string) {
			req, _ := http.NewRequest("POST", e.http.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
			req.Header.Set("Authorization", "Bearer "+e.keys[org])
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", session)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		foreignCode, foreign := post("globex", s.ID())
		unknownCode, unknown := post("globex", "no-such-session")
		if foreignCode != http.StatusNotFound || foreignCode != unknownCode || foreign != unknown {
			t.Errorf("another org's session: %d %q; an unknown one: %d %q", foreignCode, foreign, unknownCode, unknown)
		}

		if r, msg := call(t, s, "stop", map[string]any{"id": id}); r["id"] != id {
			t.Fatalf("stop: %v %s", r, msg)
		}
		if r, msg := call(t, s, "end", map[string]any{"id": id}); r["ended"] != true {
			t.Fatalf("end: %v %s", r, msg)
		}
		if _, msg := call(t, s, "read", map[string]any{"id": id}); msg != "not_found: sandbox not found" {
			t.Errorf("read after end: %q", msg)
		}

		// No key, a wrong key: no MCP at all.
		for _, key := range []string{"", "sbk_wrong"} {
			req, _ := http.NewRequest("POST", e.http.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("/mcp with key %q: %d", key, res.StatusCode)
			}
		}
	})
}

type sseEvent struct {
	ID, Kind string
	Text     string
}

// follow reads a session's event stream and sends every event on the
// returned channel, until the body ends.
func (e *env) follow(ctx context.Context, org, name, lastID string) (<-chan sseEvent, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/sessions/"+name+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[org])
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		res.Body.Close()
		return nil, &statusError{res.StatusCode}
	}
	ch := make(chan sseEvent, 100)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Kind = line[7:]
			case strings.HasPrefix(line, "data: "):
				var d struct{ Text string }
				json.Unmarshal([]byte(line[6:]), &d)
				ev.Text = d.Text
			case line == "" && ev.ID != "":
				ch <- ev
				ev = sseEvent{}
			}
		}
	}()
	return ch, nil
}

type statusError struct{ code int }

func (s *statusError) Error() string { return http.StatusText(s.code) }

// TestNarration: a follower sees a command's output before the command
// ends; a secret split across two writes is redacted in the stream and in
// the answer; a late joiner gets the backlog; sessions are per org.
func TestNarration(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := e.lease("acme", map[string]any{"ttlSec": 300})
		events, err := e.follow(ctx, "acme", "build-1", "")
		if err != nil {
			t.Fatal(err)
		}
		const secret = "s3cr3t-T0KEN-value"
		// The secret is printed in two writes with a pause between, so it
		// crosses a chunk boundary; then the command waits for a file that the
		// test writes only after it has seen the first line narrated.
		script := `printf 'first line\n'; printf 'token=s3cr3t-T0'; sleep 0.5; printf 'KEN-value\n' >&1
while [ ! -e go.flag ]; do sleep 0.05; done; echo after-flag; echo oops >&2`
		answer := make(chan execAnswer, 1)
		go func() {
			a := execAnswer{}
			r := e.do("POST", "/v1/sandbox/run", "acme", map[string]any{"id": id, "command": script, "session": "build-1", "redact": []string{secret}})
			json.Unmarshal(r.Body, &a)
			answer <- a
		}()
		var seen strings.Builder
		var kinds []string
		var lastID string
		flagged := false
		for ev := range events {
			kinds = append(kinds, ev.Kind)
			lastID = ev.ID
			if ev.Kind == "stdout" {
				seen.WriteString(ev.Text)
			}
			if strings.Contains(seen.String(), "first line") && !flagged {
				flagged = true
				// The command is still running: it waits for this file.
				select {
				case a := <-answer:
					t.Fatalf("the command ended before its output was narrated: %+v", a)
				default:
				}
				e.must(http.StatusOK, "POST", "/v1/sandbox/write", "acme", map[string]any{"id": id, "path": "go.flag", "data": ""})
			}
			if ev.Kind == "exit" {
				break
			}
		}
		a := <-answer
		if strings.Contains(seen.String(), secret) || !strings.Contains(seen.String(), "token=[redacted]\n") || !strings.Contains(seen.String(), "after-flag") {
			t.Errorf("narrated stdout: %q", seen.String())
		}
		if a.Stdout != "first line\ntoken=[redacted]\nafter-flag\n" || a.Stderr != "oops\n" {
			t.Errorf("answer: %+v", a)
		}
		if kinds[0] != "start" || !strings.Contains(strings.Join(kinds, ","), "stderr") {
			t.Errorf("event kinds: %v", kinds)
		}

		// A late joiner gets the backlog; one resuming from the last id gets
		// only what came after.
		late, err := e.follow(ctx, "acme", "build-1", "")
		if err != nil {
			t.Fatal(err)
		}
		var backlog strings.Builder
		for ev := range late {
			backlog.WriteString(ev.Text)
			if ev.Kind == "exit" {
				break
			}
		}
		if !strings.Contains(backlog.String(), "first line") || strings.Contains(backlog.String(), secret) {
			t.Errorf("backlog: %q", backlog.String())
		}
		e.exec("acme", id, map[string]any{"command": "echo second run", "session": "build-1"})
		resumed, err := e.follow(ctx, "acme", "build-1", lastID)
		if err != nil {
			t.Fatal(err)
		}
		for ev := range resumed {
			if strings.Contains(ev.Text, "first line") {
				t.Errorf("resumed stream repeats old events")
			}
			if ev.Kind == "exit" {
				break
			}
		}

		// Another org's session of the same name is another log.
		other, err := e.follow(ctx, "globex", "build-1", "")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-other:
			t.Errorf("globex sees acme's narration: %+v", ev)
		case <-time.After(300 * time.Millisecond):
		}
		if _, err := e.follow(ctx, "acme", "-bad", ""); err == nil {
			t.Errorf("a bad session name was followed")
		}
	})
}
