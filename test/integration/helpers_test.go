package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/apicheck"
	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// imagesDir is where scripts/deps.sh builds the class images.
func imagesDir() string { return testenv.Images() }

// env is one real server on a temporary data directory, with the real
// runsc and the real images, behind a real HTTP listener.
type env struct {
	t    testing.TB
	srv  *server.Server
	http *httptest.Server
	data string
	keys map[string]string // org → key: system's admin, the others tenant
	cfg  server.Config     // as the server was made: a restart makes it again
	host string            // the Host of every call when set (a server behind an ingress)

	docOnce sync.Once
	doc     *apicheck.Checker // the served OpenAPI document, which every e.do is held to
	logs    *logBuffer        // the server's log

	// A benchmark's env holds its answers to the document and to noLeak
	// after the run (benchEnv): the checks are the test's work, not the
	// service's, and would be timed with each call.
	deferChecks bool
	checksMu    sync.Mutex
	checks      []func()
}

// logBuffer is a log's text, written by the server's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// levelFilter passes the lines of warnings and errors (the text
// handler's level=WARN and level=ERROR).
type levelFilter struct{ w io.Writer }

func (f levelFilter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("level=WARN")) || bytes.Contains(p, []byte("level=ERROR")) {
		return f.w.Write(p)
	}
	return len(p), nil
}

func newEnv(t testing.TB, needImages ...string) *env {
	t.Helper()
	return newEnvImages(t, imagesDir(), needImages...)
}

// newEnvImages is newEnv over another images directory.
func newEnvImages(t testing.TB, images string, needImages ...string) *env {
	t.Helper()
	return newEnvConfig(t, server.Config{Images: images}, needImages...)
}

// newEnvConfig is newEnv with parts of the server configuration set; Data
// and Runsc are filled in, Images defaults to the test images.
func newEnvConfig(t testing.TB, cfg server.Config, needImages ...string) *env {
	t.Helper()
	if cfg.Images == "" {
		cfg.Images = imagesDir()
	}
	images := cfg.Images
	testenv.NeedGVisor(t, gvisor.DefaultRunsc())
	if images == testenv.Images() {
		testenv.NeedGVisor(t, gvisor.DefaultRunsc(), append([]string{"exec"}, needImages...)...)
	}
	for _, name := range append([]string{"exec"}, needImages...) {
		if _, err := image.Rootfs(images, name); err != nil {
			t.Fatalf("%v (tests read images from SANDBOX_TEST_IMAGES=%s)", err, images)
		}
	}
	// A short data path keeps unix socket paths under runsc's limit.
	data, err := os.MkdirTemp("", "sbt-")
	if err != nil {
		t.Fatal(err)
	}
	// The server's log is kept (at info) for the tests that grep it for
	// secrets, and shown from warnings up with -v.
	logs := &logBuffer{}
	var out io.Writer = logs
	if testing.Verbose() {
		out = io.MultiWriter(logs, levelFilter{os.Stderr})
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Data, cfg.GVisor.Runsc = data, gvisor.DefaultRunsc()
	switch cfg.Runner {
	case "":
		cfg.Runner = runnerBin(t)
	case "none":
		cfg.Runner = ""
	}
	// The listener comes first: its address is the issuer's URL (the
	// lease credentials' iss), as --listen is for the binary.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Identity.URL == "" {
		cfg.Identity.URL = "http://" + ln.Addr().String()
	}
	srv, err := server.New(context.Background(), cfg, log)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler)
	ts.Listener.Close()
	ts.Listener = ln
	ts.Start()
	e := &env{t: t, srv: srv, http: ts, data: data, keys: map[string]string{}, logs: logs, cfg: cfg}
	t.Cleanup(e.close)
	for _, org := range []string{"acme", "globex", "system"} {
		create := srv.Store.CreateKey
		if org == "system" {
			create = srv.Store.CreateAdminKey // the operator's, for the operator routes
		}
		key, err := create(context.Background(), org, "test")
		if err != nil {
			t.Fatal(err)
		}
		e.keys[org] = key
	}
	return e
}

var (
	runnerOnce sync.Once
	runnerPath string
	runnerErr  error
)

// runnerBin builds cmd/sandbox-runner once per test binary, the way
// scripts/deps.sh does (static).
func runnerBin(t testing.TB) string {
	t.Helper()
	runnerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbt-runner-")
		if err != nil {
			runnerErr = err
			return
		}
		runnerPath = filepath.Join(dir, "sandbox-runner")
		cmd := exec.Command("go", "build", "-trimpath", "-o", runnerPath, "github.com/sandboxd/sandbox/cmd/sandbox-runner")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			runnerErr = fmt.Errorf("building the runner: %v: %s", err, out)
		}
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return runnerPath
}

// close deletes every container the test left, then the data directory.
func (e *env) close() {
	ctx := context.Background()
	objs, err := e.srv.Runtime.List(ctx, map[string]string{runtime.LabelSandbox: ""})
	if err != nil {
		e.t.Errorf("listing leftovers: %v", err)
	}
	for _, o := range objs {
		if err := e.srv.Runtime.Delete(ctx, runtime.Ref{Name: o.Name, UID: o.UID}); err != nil {
			e.t.Errorf("deleting %s: %v", o.Name, err)
		}
	}
	e.http.Close()
	e.srv.Close()
	// runsc bind-mounts an empty network namespace for its gofers here.
	unix.Unmount(filepath.Join(e.data, "runtime", "runsc", "null-netns"), unix.MNT_DETACH)
	os.RemoveAll(e.data)
}

// resp is one HTTP answer.
type resp struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r resp) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("answer is not a JSON object: %v: %q", err, r.Body)
	}
	return m
}

// do sends one request as org ("" = no Authorization) and checks, on every
// answer, that no runtime name or host path leaks.
func (e *env) do(method, path, org string, body any) resp {
	e.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		raw, _ = json.Marshal(b)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if org != "" {
		key := e.keys[org]
		if key == "" {
			key = org // a raw token
		}
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if e.host != "" {
		req.Host = e.host
	}
	// A command the test allows longer than the usual two minutes (its
	// timeoutSec) is waited for that long: on a busy CI machine an install
	// that takes 10 s alone took over two minutes.
	wait := 2 * time.Minute
	if m, ok := body.(map[string]any); ok {
		if sec, ok := m["timeoutSec"].(int); ok {
			wait = max(wait, time.Duration(sec)*time.Second+30*time.Second)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	r := resp{Status: res.StatusCode, Header: res.Header, Body: b}
	checks := func() {
		e.noLeak(method+" "+path, r)
		e.check(apicheck.Exchange{Method: method, URL: e.http.URL + path, Header: req.Header, Body: raw, Status: res.StatusCode, RespHeader: res.Header, RespBody: b})
	}
	if e.deferChecks {
		e.checksMu.Lock()
		e.checks = append(e.checks, checks)
		e.checksMu.Unlock()
	} else {
		checks()
	}
	return r
}

// runChecks holds the answers a benchmark's env kept to what do checks.
func (e *env) runChecks() {
	e.checksMu.Lock()
	checks := e.checks
	e.checks = nil
	e.checksMu.Unlock()
	for _, c := range checks {
		c()
	}
}

// check holds an exchange to the served OpenAPI document.
func (e *env) check(x apicheck.Exchange) {
	e.t.Helper()
	e.docOnce.Do(func() {
		var err error
		if e.doc, err = apicheck.Fetch(e.http.URL); err != nil {
			e.t.Fatal(err)
		}
	})
	if err := e.doc.Check(x); err != nil {
		e.t.Error(err)
	}
}

// noLeak fails if an answer names a runtime object or a host path.
func (e *env) noLeak(what string, r resp) {
	e.t.Helper()
	all := string(r.Body)
	for k, v := range r.Header {
		all += k + ": " + strings.Join(v, ",") + "\n"
	}
	for _, bad := range []string{"sbx-", e.data, "/runtime/", "runsc"} {
		if strings.Contains(all, bad) {
			e.t.Errorf("%s: answer contains %q: %.300s", what, bad, all)
		}
	}
}

// must asserts a status and returns the answer.
func (e *env) must(want int, method, path, org string, body any) resp {
	e.t.Helper()
	r := e.do(method, path, org, body)
	if r.Status != want {
		e.t.Fatalf("%s %s as %q: status %d, want %d: %s", method, path, org, r.Status, want, r.Body)
	}
	return r
}

// lease leases a sandbox for org and returns its id.
func (e *env) lease(org string, body map[string]any) string {
	e.t.Helper()
	r := e.must(http.StatusCreated, "POST", "/v1/sandbox", org, body)
	id, _ := r.JSON(e.t)["id"].(string)
	if id == "" {
		e.t.Fatalf("lease answer has no id: %s", r.Body)
	}
	return id
}

type execAnswer struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	TimedOut bool   `json:"timedOut"`
}

func (e *env) exec(org, id string, body map[string]any) execAnswer {
	e.t.Helper()
	r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/exec", org, body)
	var a execAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// sh runs a shell line as org in id and returns its stdout, failing on a
// non-zero exit.
func (e *env) sh(org, id, line string) string {
	e.t.Helper()
	a := e.exec(org, id, map[string]any{"command": line})
	if a.ExitCode != 0 {
		e.t.Fatalf("%q exited %d: %s%s", line, a.ExitCode, a.Stdout, a.Stderr)
	}
	return a.Stdout
}
