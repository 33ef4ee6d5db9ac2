package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/sandboxd/sandbox/internal/files"
	"github.com/sandboxd/sandbox/internal/processes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/apicheck"
	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/stats"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/terminal"
	"github.com/sandboxd/sandbox/internal/usage"
	"github.com/sandboxd/sandbox/internal/volumes"
)

// apiEnv is the real handler tree over the real service and store, on the
// fake runtime: what the routes answer, without a sandbox.
type apiEnv struct {
	t    *testing.T
	url  string
	st   *store.Store
	rt   *fake.Runtime
	keys map[string]string
	doc  *apicheck.Checker
	h    *api.Server
}

func newAPI(t *testing.T, cfg ...api.Config) *apiEnv { return newAPIWithout(t, nil, cfg...) }

// newAPIWithout is newAPI on a fake backend that lacks the capabilities
// named.
func newAPIWithout(t *testing.T, lacks []runtime.Capability, cfg ...api.Config) *apiEnv {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	caps := runtime.Discover(rt).Without(lacks...)
	vols := volumes.New(st, rt, log)
	cmds := &quota.Commands{}
	svc := service.New(service.Config{}, service.Deps{Store: st, Runtime: rt, Capabilities: &caps, ProjectLocks: vols, Commands: cmds, Metrics: m, Log: log, Quotas: st})
	fs := files.Join(svc, files.New(svc, 0, 0))
	it := interp.New(fs, service.Timeouts{}, nil, log)
	var names []string
	for _, c := range caps.Names() {
		names = append(names, string(c))
	}
	h := api.New(api.Deps{Leases: svc, Work: svc, Stats: stats.New(svc, caps.Stats, "fake"), Volumes: vols, Files: fs.Files, Quotas: usage.New(quota.Policy{}, st, st, cmds), Operator: st, Consoles: terminal.New(svc, nil), Interpreter: it, Ops: ops.New(fs, processes.New(svc, st, rt, nil, nil, "fake", nil, nil), nil, it), Auth: st,
		Metrics: m.Handler(), Backend: "fake", Capabilities: names,
		MCP: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { // a door that authenticates by itself
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "{}")
		}),
	}, log, append(cfg, api.Config{})[0])
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Close)
	e := &apiEnv{t: t, url: srv.URL, st: st, rt: rt, keys: map[string]string{}, h: h}
	for _, org := range []string{"acme", "globex", "system"} {
		create := st.CreateKey
		if org == "system" {
			create = st.CreateAdminKey // the operator's, for the operator routes
		}
		if e.keys[org], err = create(context.Background(), org, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%s: %v", a.body, err)
	}
}

func (e *apiEnv) do(method, path, org, body string) answer {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if org != "" {
		req.Header.Set("Authorization", "Bearer "+e.keys[org])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	e.check(apicheck.Exchange{Method: method, URL: e.url + path, Header: req.Header, Body: []byte(body), Status: res.StatusCode, RespHeader: res.Header, RespBody: b})
	return answer{res.StatusCode, res.Header, b}
}

// check holds an exchange to the served OpenAPI document.
func (e *apiEnv) check(x apicheck.Exchange) {
	e.t.Helper()
	if e.doc == nil {
		var err error
		if e.doc, err = apicheck.Fetch(e.url); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.doc.Check(x); err != nil {
		e.t.Error(err)
	}
}

func (e *apiEnv) must(status int, method, path, org, body string) answer {
	e.t.Helper()
	a := e.do(method, path, org, body)
	if a.status != status {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, a.status, a.body, status)
	}
	return a
}

// TestRoutes walks the statuses each kind of answer maps to, in one place.
func TestRoutes(t *testing.T) {
	e := newAPI(t)
	var sb struct {
		ID, Status, Class string
	}
	e.must(201, "POST", "/v1/sandbox", "acme", `{"class":"exec"}`).json(t, &sb)
	if sb.ID == "" || sb.Status != "running" || sb.Class != "exec" {
		t.Fatalf("lease: %+v", sb)
	}
	id := sb.ID
	e.rt.SetExec(fake.Exit(0, "42\n"))
	var res service.ExecResult
	e.must(200, "POST", "/v1/sandbox/"+id+"/exec", "acme", `{"argv":["python3","-c","print(42)"]}`).json(t, &res)
	if res.Stdout != "42\n" {
		t.Errorf("exec: %+v", res)
	}
	e.rt.SetExec(fake.Exit(1, ""))
	e.must(200, "POST", "/v1/sandboxes/"+id+"/exec", "acme", `{"command":"false"}`).json(t, &res)
	if res.ExitCode != 1 {
		t.Errorf("a failing command is a 200 with its code: %+v", res)
	}
	for _, tc := range []struct {
		name, method, path, org, body string
		status                        int
		contains                      string
	}{
		{"no key", "GET", "/v1/sandbox", "", "", 401, "missing bearer token"},
		{"bad key", "GET", "/v1/sandbox", "nobody", "", 401, ""},
		{"another org's id", "GET", "/v1/sandbox/" + id, "globex", "", 404, "sandbox not found"},
		{"another org's exec", "POST", "/v1/sandbox/" + id + "/exec", "globex", `{"command":"id"}`, 404, "sandbox not found"},
		{"a malformed id", "DELETE", "/v1/sandbox/sb_x", "acme", "", 404, "sandbox not found"},
		{"unknown class", "POST", "/v1/sandbox", "acme", `{"class":"gpu"}`, 400, "known classes are"},
		{"an org in the body", "POST", "/v1/sandbox", "acme", `{"org":"globex"}`, 400, `unknown field "org"`},
		{"malformed JSON", "POST", "/v1/sandbox/" + id + "/exec", "acme", `{"argv":`, 400, "invalid JSON body"},
		{"neither argv nor command", "POST", "/v1/sandbox/" + id + "/exec", "acme", `{}`, 400, "give argv"},
		{"a path out of the workdir", "GET", "/v1/sandbox/" + id + "/fs?path=../../etc/passwd", "acme", "", 400, ""},
		{"a method not allowed", "PUT", "/v1/sandbox/" + id, "acme", "", 405, "is not allowed here"},
		{"no such route", "GET", "/v2/nothing", "acme", "", 404, "no such route"},
		{"metrics for a tenant", "GET", "/metrics", "acme", "", 403, "operator org"},
		{"a bad status filter", "GET", "/v1/sandbox?status=gone", "acme", "", 400, "unknown status"},
		{"a bad limit", "GET", "/v1/sandbox?limit=0", "acme", "", 400, "limit must be"},
		{"a forged cursor", "GET", "/v1/sandbox?cursor=abc", "acme", "", 400, "cursor"},
		{"purge that is not a flag", "DELETE", "/v1/sandbox/" + id + "?purge=maybe", "acme", "", 400, "purge must be"},
		{"unknown language", "POST", "/v1/exec", "acme", `{"language":"cobol","code":"x"}`, 400, "py, js, ts"},
		{"screen of an exec sandbox", "POST", "/v1/sandbox/" + id + "/screen/ticket", "acme", "", 409, "has no screen"},
		{"typed run without an id", "POST", "/v1/sandbox/run", "acme", `{"command":"id"}`, 400, "id is required"},
		{"typed run with an org", "POST", "/v1/sandbox/run", "acme", `{"id":"` + id + `","org":"globex"}`, 400, "unknown field"},
		{"a socket without a ticket", "GET", "/v1/sandbox/" + id + "/terminal/ws", "", "", 401, "ticket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(tc.method, tc.path, tc.org, tc.body)
			var body struct{ Error string }
			json.Unmarshal(a.body, &body)
			if a.status != tc.status || !strings.Contains(body.Error, tc.contains) {
				t.Errorf("%d %s, want %d containing %q", a.status, a.body, tc.status, tc.contains)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
		})
	}
	e.must(200, "GET", "/metrics", "system", "")
	var typed service.ExecResult
	e.rt.SetExec(fake.Exit(0, "typed"))
	e.must(200, "POST", "/v1/sandbox/run", "acme", `{"id":"`+id+`","command":"echo typed"}`).json(t, &typed)
	if typed.Stdout != "typed" {
		t.Errorf("typed run: %+v", typed)
	}
	e.must(200, "POST", "/v1/sandbox/"+id+"/pause", "acme", "")
	var woke struct{ Woken bool }
	e.must(200, "POST", "/v1/sandbox/"+id+"/resume", "acme", "").json(t, &woke)
	if !woke.Woken {
		t.Error("resume of a sleeping sandbox did not say woken")
	}
	var ticket terminal.TicketResult
	e.must(201, "POST", "/v1/sandbox/"+id+"/terminal/ticket", "acme", "").json(t, &ticket)
	if ticket.ExpiresIn != 30 || !strings.HasPrefix(ticket.URL, "/v1/sandbox/"+id+"/terminal?ticket=tk_") {
		t.Errorf("ticket %+v", ticket)
	}
	e.must(200, "DELETE", "/v1/sandbox/"+id, "acme", "")
	e.must(404, "GET", "/v1/sandbox/"+id, "acme", "")
}

// TestCapAnswer: the 17th live exec sandbox is a 429 with Retry-After.
func TestCapAnswer(t *testing.T) {
	e := newAPI(t)
	for range 16 {
		e.must(201, "POST", "/v1/sandbox", "acme", "")
	}
	a := e.must(429, "POST", "/v1/sandbox", "acme", "")
	if a.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a 429")
	}
	e.must(201, "POST", "/v1/sandbox", "globex", "")
}

// TestStartFailureAnswer: a 503 whose message names the kept row and
// nothing of the runtime's own words.
func TestStartFailureAnswer(t *testing.T) {
	e := newAPI(t)
	e.rt.Set(func(r *fake.Runtime) { r.CreateErr = io.ErrUnexpectedEOF })
	a := e.must(503, "POST", "/v1/sandbox", "acme", "")
	if !strings.Contains(string(a.body), "with status error") || strings.Contains(string(a.body), "unexpected EOF") {
		t.Errorf("answer %s", a.body)
	}
	var list struct {
		Sandboxes []struct{ Status, Error string }
	}
	e.must(200, "GET", "/v1/sandbox?status=error", "acme", "").json(t, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Error == "" {
		t.Errorf("error rows %+v", list)
	}
}

// TestBrokenChannelAnswer: 502 when the exec channel breaks.
func TestBrokenChannelAnswer(t *testing.T) {
	e := newAPI(t)
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	e.rt.SetExec(func(context.Context, string, runtime.ExecRequest) error { return fake.ErrBroken })
	e.must(502, "POST", "/v1/sandbox/"+sb.ID+"/exec", "acme", `{"command":"x"}`)
}

// TestQuotaRoutes: the tenant sees each quota with its use and its volumes;
// only the operator org reads or sets an org's override; a refusal names
// the quota (403 for projects, which waiting does not free).
func TestQuotaRoutes(t *testing.T) {
	e := newAPI(t)
	e.must(201, "POST", "/v1/sandbox", "acme", `{"class":"dev","project":"p1"}`)
	var q struct {
		Quotas []struct {
			Name, Class string
			Limit, Used float64
		}
	}
	e.must(200, "GET", "/v1/sandbox/quota", "acme", "").json(t, &q)
	found := map[string]float64{}
	for _, l := range q.Quotas {
		found[l.Name+l.Class] = l.Used
	}
	if found["livedev"] != 1 || found["cpus"] != 2 || found["projects"] != 1 || found["diskMiB"] != 10240 {
		t.Errorf("quota lines %+v", q)
	}
	e.must(403, "PUT", "/v1/orgs/acme/quota", "acme", `{"projects":5}`)
	e.must(403, "GET", "/v1/orgs/acme/quota", "globex", "")
	var set struct {
		Override  struct{ Projects *int }
		Effective struct{ Projects *int }
	}
	e.must(200, "PUT", "/v1/orgs/acme/quota", "system", `{"projects":1}`).json(t, &set)
	if set.Override.Projects == nil || *set.Override.Projects != 1 || *set.Effective.Projects != 1 {
		t.Errorf("set: %+v", set)
	}
	e.must(400, "PUT", "/v1/orgs/acme/quota", "system", `{"projects":-1}`)
	e.must(400, "PUT", "/v1/orgs/acme/quota", "system", `{"live":{"gpu":1}}`)
	a := e.must(403, "POST", "/v1/sandbox", "acme", `{"class":"dev","project":"p2"}`)
	if !strings.Contains(string(a.body), "quota projects exceeded: limit 1, in use 1") {
		t.Errorf("refusal %s", a.body)
	}
	var vols struct {
		Volumes []struct {
			Project, LiveSandbox string
			SizeMiB              int64
		}
	}
	e.must(200, "GET", "/v1/volumes", "acme", "").json(t, &vols)
	if len(vols.Volumes) != 1 || vols.Volumes[0].Project != "p1" || vols.Volumes[0].LiveSandbox == "" {
		t.Errorf("volumes %+v", vols)
	}
	e.must(409, "DELETE", "/v1/volumes/p1", "acme", "")
	e.must(404, "DELETE", "/v1/volumes/p1", "globex", "")
	e.must(200, "DELETE", "/v1/sandbox/"+vols.Volumes[0].LiveSandbox, "acme", "")
	e.must(200, "DELETE", "/v1/volumes/p1", "acme", "")
	e.must(201, "POST", "/v1/sandbox", "acme", `{"class":"dev","project":"p2"}`)
	e.must(200, "PUT", "/v1/orgs/acme/quota", "system", `{}`)
}

// TestSlowBody: a body that stops coming is given up after the idle bound
// (here 300 ms): the write answers and the connection is freed, instead of
// being held for as long as the client trickles.
func TestSlowBody(t *testing.T) {
	e := newAPI(t, api.Config{Stall: 300 * time.Millisecond})
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if req.Stdin != nil {
			io.Copy(io.Discard, req.Stdin)
		}
		return nil
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/sandbox/%s/fs?path=slow.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n0123456789", sb.ID, e.keys["acme"])
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))

	start := time.Now()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(line, "400") || time.Since(start) > 5*time.Second {
		t.Errorf("a stalled body: %q %v after %v", line, err, time.Since(start))
	}
}

// TestStalledReader: a client that takes none of an answer for the stall
// bound (here 300 ms) loses its connection, and the command writing to it
// ends, instead of holding its slot for as long as the client sits.
func TestStalledReader(t *testing.T) {
	e := newAPI(t, api.Config{Stall: 300 * time.Millisecond})
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	ended := make(chan error, 1)
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		// The read script's answer: a head line, then 256 MiB.
		fmt.Fprintf(req.Stdout, "F %d\n", 256<<20)
		chunk := make([]byte, 64<<10)
		for range 256 << 4 {
			if _, err := req.Stdout.Write(chunk); err != nil {
				ended <- err
				return err
			}
			if ctx.Err() != nil {
				ended <- ctx.Err()
				return ctx.Err()
			}
		}
		ended <- nil
		return nil
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/sandbox/%s/fs?path=big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", sb.ID, e.keys["acme"])
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the whole answer went into a client that reads nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a client reading nothing held the command for 10 s")
	}
	// Its command slot is free again: the org's next command runs.
	e.rt.SetExec(nil)
	e.must(200, "POST", "/v1/sandbox/"+sb.ID+"/exec", "acme", `{"argv":["true"]}`)
}

// TestConsoleInputIsBounded: a client typing into a terminal whose program
// takes no input is held back once about a megabyte waits in the server
// (plus what the kernel's socket buffers hold): it cannot park 96 MiB there.
func TestConsoleInputIsBounded(t *testing.T) {
	e := newAPI(t)
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	e.rt.SetExec(fake.Block(nil)) // the shell reads nothing
	var tk terminal.TicketResult
	e.must(201, "POST", "/v1/sandbox/"+sb.ID+"/terminal/ticket", "acme", "").json(t, &tk)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/v1/sandbox/"+sb.ID+"/terminal/ws?ticket="+tk.Ticket, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	frame := make([]byte, 1<<20)
	sent := 0
	for sent < 96 {
		wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Write(wctx, websocket.MessageBinary, frame)
		wcancel()
		if err != nil {
			break
		}
		sent++
	}
	t.Logf("the client got %d MiB out before the server stopped taking input", sent)
	if sent > 32 {
		t.Errorf("the server took %d MiB of input a program never read", sent)
	}
}

// TestRequestsPerKey: one key holds at most MaxPerKey requests at once; the
// next is a 429 (on /mcp too), another key is served.
func TestRequestsPerKey(t *testing.T) {
	e := newAPI(t)
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	if err := e.st.SetOrgQuota(context.Background(), "acme", quota.Policy{Commands: ptr(10000)}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, api.MaxPerKey)
	e.rt.SetExec(fake.Block(started))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range api.MaxPerKey {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/sandbox/"+sb.ID+"/exec", strings.NewReader(`{"command":"sleep 99"}`))
			req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	for range api.MaxPerKey {
		<-started
	}
	a := e.must(429, "GET", "/v1/sandbox", "acme", "")
	if !strings.Contains(string(a.body), "requests of this key are open") || a.header.Get("Retry-After") == "" {
		t.Errorf("%s", a.body)
	}
	e.must(200, "GET", "/v1/sandbox", "globex", "")
	// MCP, which authenticates by itself, is held to the same bound.
	e.must(429, "POST", "/mcp", "acme", "{}")
	e.must(200, "POST", "/mcp", "globex", "{}")
	cancel()
	wg.Wait()
}

func ptr[T any](v T) *T { return &v }

// TestFollowerPagesTheBacklog: a follower of a long log gets every event in
// order, read from the store a page at a time.
func TestFollowerPagesTheBacklog(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	svc := service.New(service.Config{}, service.Deps{Store: st, Runtime: fake.New(), Log: log, Quotas: st})
	fs := files.Join(svc, files.New(svc, 0, 0))
	it := interp.New(fs, service.Timeouts{}, nil, log)
	sessions := narrate.New(st, log)
	pages := pageCounter{Log: sessions}
	ctx, cancel := context.WithCancel(context.Background())
	go sessions.Run(ctx)
	defer func() { cancel(); sessions.Wait() }()
	h := api.New(api.Deps{Leases: svc, Work: svc, Files: fs.Files, Quotas: usage.New(quota.Policy{}, st, st, &quota.Commands{}), Operator: st, Consoles: terminal.New(svc, nil), Interpreter: it,
		Ops: ops.New(fs, nil, nil, it), Auth: st, Sessions: &pages}, log, api.Config{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	key, _ := st.CreateKey(context.Background(), "acme", "t")
	n := 3*narrate.BacklogPage + 17
	for i := range n {
		sessions.Append("acme", "long", "stdout", []byte(strconv.Itoa(i)))
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", srv.URL+"/v1/sessions/long/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	next := 0
	for next < n && sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Text string }
		json.Unmarshal([]byte(data), &ev)
		if ev.Text != strconv.Itoa(next) {
			t.Fatalf("event %d is %q", next, ev.Text)
		}
		next++
	}
	if next != n {
		t.Errorf("got %d of %d events", next, n)
	}
	if pages.largest > narrate.BacklogPage || pages.pages < 4 {
		t.Errorf("the backlog came in %d pages, the largest %d events", pages.pages, pages.largest)
	}
}

// pageCounter records the pages of backlog a follower was handed.
type pageCounter struct {
	*narrate.Log
	mu             sync.Mutex
	pages, largest int
}

func (p *pageCounter) count(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pages++
	p.largest = max(p.largest, n)
}

func (p *pageCounter) Follow(ctx context.Context, session string, after int64) ([]narrate.Event, *narrate.Follower, error) {
	b, f, err := p.Log.Follow(ctx, session, after)
	p.count(len(b))
	return b, f, err
}

func (p *pageCounter) Backlog(ctx context.Context, session string, after int64, limit int) ([]narrate.Event, error) {
	b, err := p.Log.Backlog(ctx, session, after, limit)
	p.count(len(b))
	return b, err
}

// refSandbox is the Sandbox object as the reference's generated clients
// declare it (SPEC §4): its times are integers, so an answer with RFC 3339
// strings fails to decode.
type refSandbox struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	Org        string `json:"org"`
	Class      string `json:"class"`
	Project    string `json:"project"`
	Status     string `json:"status"`
	Image      string `json:"image"`
	Runtime    string `json:"runtime"`
	Volume     string `json:"volume"`
	CreatedAt  int64  `json:"createdAt"`
	LastUsedAt int64  `json:"lastUsedAt"`
	ExpiresAt  int64  `json:"expiresAt"`
	Error      string `json:"error"`
}

// TestWireCompat: lease, get, list, renew and the typed lease decode into
// the reference's field types, with kind, org and (for a project) volume;
// the typed read says dir.
func TestWireCompat(t *testing.T) {
	e := newAPI(t)
	decode := func(a answer) refSandbox {
		t.Helper()
		var sb refSandbox
		if err := json.Unmarshal(a.body, &sb); err != nil {
			t.Fatalf("the reference's client cannot decode %s: %v", a.body, err)
		}
		if sb.Kind != "sandbox" || sb.Org != "acme" || sb.ID == "" {
			t.Errorf("kind, org or id missing: %s", a.body)
		}
		if now := time.Now().Unix(); sb.CreatedAt > now || sb.CreatedAt < now-60 || sb.ExpiresAt <= sb.CreatedAt || sb.LastUsedAt < sb.CreatedAt {
			t.Errorf("times are not Unix seconds of now: %s", a.body)
		}
		return sb
	}
	exec := decode(e.must(201, "POST", "/v1/sandbox", "acme", ""))
	if exec.Volume != "" {
		t.Errorf("a scratch sandbox shows a volume: %+v", exec)
	}
	dev := decode(e.must(201, "POST", "/v1/sandbox", "acme", `{"class":"dev","project":"site"}`))
	if dev.Volume == "" || dev.Project != "site" {
		t.Errorf("a project sandbox without its volume: %+v", dev)
	}
	decode(e.must(200, "GET", "/v1/sandbox/"+dev.ID, "acme", ""))
	decode(e.must(200, "POST", "/v1/sandbox/"+dev.ID+"/renew", "acme", `{"ttlSec":600}`))
	decode(e.must(200, "POST", "/v1/sandbox/lease", "acme", `{"id":"`+exec.ID+`"}`))
	var list struct{ Sandboxes []json.RawMessage }
	e.must(200, "GET", "/v1/sandbox", "acme", "").json(t, &list)
	for _, raw := range list.Sandboxes {
		decode(answer{body: raw})
	}
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		io.WriteString(req.Stdout, "D\nsub/\nfile.txt\n")
		return &runtime.ExitError{Code: 10} // the read script's "a directory"
	})
	var read struct {
		Dir     *bool
		Entries []string
	}
	e.must(200, "POST", "/v1/sandbox/read", "acme", `{"id":"`+exec.ID+`","path":"."}`).json(t, &read)
	if read.Dir == nil || !*read.Dir {
		t.Errorf("a directory's typed read: %+v", read)
	}
}

// TestExecStream: with Accept: application/x-ndjson an exec answers a line
// per chunk as the program writes it (text when UTF-8, base64 when not),
// then its exit; a refusal before the program starts is a plain error.
func TestExecStream(t *testing.T) {
	e := newAPI(t)
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		io.WriteString(req.Stdout, "héllo\n")
		req.Stderr.Write([]byte{0xff, 0xfe})
		return &runtime.ExitError{Code: 3}
	})
	stream := func(id string) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", e.url+"/v1/sandbox/"+id+"/exec", strings.NewReader(`{"command":"x"}`))
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		req.Header.Set("Accept", "application/x-ndjson")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	res, b := stream(sb.ID)
	want := `{"stdout":"héllo\n"}` + "\n" + `{"stderrBase64":"//4="}` + "\n" + `{"exitCode":3}` + "\n"
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" || string(b) != want {
		t.Errorf("stream: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	if res, b := stream("sb_" + strings.Repeat("z", 26)); res.StatusCode != 404 || !strings.Contains(string(b), "not found") {
		t.Errorf("a stream for an unknown id: %d %s", res.StatusCode, b)
	}
}

// TestInfo: GET /v1/info names the backend and what it can do beyond
// the core, for any key; a client asks it for a capability instead of
// guessing from the backend's name.
func TestInfo(t *testing.T) {
	e := newAPIWithout(t, []runtime.Capability{runtime.CapFork, runtime.CapStats})
	var info struct {
		Backend      string
		Capabilities []string
	}
	e.must(200, "GET", "/v1/info", "acme", "").json(t, &info)
	if info.Backend != "fake" || strings.Join(info.Capabilities, ",") != "checkpoint,network" {
		t.Errorf("info: %+v", info)
	}
	e.must(401, "GET", "/v1/info", "", "")
	// What it leaves out answers 501.
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	e.must(501, "POST", "/v1/sandbox/"+sb.ID+"/fork", "acme", "")
}

// TestStatsUnavailable: a backend that cannot count answers the disk and
// says why the rest is absent; a sleeping sandbox is a 409, not woken.
func TestStatsUnavailable(t *testing.T) {
	e := newAPIWithout(t, []runtime.Capability{runtime.CapStats})
	var sb struct{ ID string }
	e.must(201, "POST", "/v1/sandbox", "acme", "").json(t, &sb)
	e.rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		io.WriteString(req.Stdout, "Filesystem 1024-blocks Used Available Capacity Mounted on\nnone 524288 2932 521356 1% /mnt/data\n")
		return nil
	})
	var st struct {
		CPUSeconds  *float64
		Unavailable string
		Disk        []struct {
			Path      string
			UsedBytes int64
		}
	}
	e.must(200, "GET", "/v1/sandbox/"+sb.ID+"/stats", "acme", "").json(t, &st)
	if st.CPUSeconds != nil || !strings.Contains(st.Unavailable, "does not report") || len(st.Disk) != 1 || st.Disk[0].UsedBytes != 2932<<10 {
		t.Errorf("stats: %+v", st)
	}
	e.must(200, "POST", "/v1/sandbox/"+sb.ID+"/pause", "acme", "")
	e.must(409, "GET", "/v1/sandbox/"+sb.ID+"/stats", "acme", "")
	e.must(404, "GET", "/v1/sandbox/"+sb.ID+"/stats", "globex", "")
}

// TestDrain: once the server drains for a shutdown, /readyz is a 503 (a
// balancer stops routing), a new event stream is refused with a retry,
// and plain calls still answer (those in flight finish).
func TestDrain(t *testing.T) {
	e := newAPI(t)
	if a := e.do("GET", "/readyz", "", ""); a.status != 200 {
		t.Fatalf("readyz before: %d", a.status)
	}
	e.h.Drain()
	if a := e.do("GET", "/readyz", "", ""); a.status != 503 || a.header.Get("Retry-After") != "1" {
		t.Errorf("readyz while draining: %d %v", a.status, a.header)
	}
	if a := e.do("GET", "/v1/sessions/s1/events", "acme", ""); a.status != 503 || a.header.Get("Retry-After") == "" {
		t.Errorf("a new event stream while draining: %d %s", a.status, a.body)
	}
	if a := e.do("GET", "/v1/sandbox", "acme", ""); a.status != 200 {
		t.Errorf("a plain call while draining: %d %s", a.status, a.body)
	}
}
