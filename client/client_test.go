package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/apicheck"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// checking records every exchange of the client and holds it to the
// server's OpenAPI document (bodies up to 1 MiB: the rest are streams).
type checking struct {
	t   *testing.T
	doc *apicheck.Checker
	mu  sync.Mutex
}

func (c *checking) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Header.Get("Content-Type") == "application/json" {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || res.StatusCode == http.StatusSwitchingProtocols {
		return res, err
	}
	ct := res.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/json") {
		return res, nil // a stream: its head was checked by the server's own suites
	}
	b, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(b))
	if req.Header.Get("Content-Type") == "application/json" || req.Body == nil || req.Method == "GET" || req.Method == "DELETE" {
		if err := c.doc.Check(apicheck.Exchange{Method: req.Method, URL: req.URL.String(), Header: req.Header, Body: body,
			Status: res.StatusCode, RespHeader: res.Header, RespBody: b}); err != nil {
			c.t.Error(err)
		}
	}
	return res, nil
}

func newClient(t *testing.T) (*client.Client, *testenv.Server) {
	return newClientOn(t, "gvisor")
}

// newClientOn is newClient on a server of backend: "gvisor" on this
// machine, "kube" on the test cluster (pods, the runner in each).
func newClientOn(t *testing.T, backend string) (*client.Client, *testenv.Server) {
	orgs := []string{"acme", "globex", "system"}
	var s *testenv.Server
	if backend == "kube" {
		s = testenv.ServeKube(t, orgs)
	} else {
		s = testenv.Serve(t, gvisor.DefaultRunsc(), orgs)
	}
	doc, err := apicheck.Fetch(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(s.URL, s.Keys["acme"])
	c.HTTP = &http.Client{Transport: &checking{t: t, doc: doc}}
	return c, s
}

// backends runs f on a client of a server on each backend: gVisor on this
// machine, and pods on the test cluster (skipped, or failed in CI, without
// one).
func backends(t *testing.T, f func(t *testing.T, c *client.Client, s *testenv.Server, backend string)) {
	for _, b := range []string{"gvisor", "kube"} {
		t.Run(b, func(t *testing.T) {
			c, s := newClientOn(t, b)
			f(t, c, s, b)
		})
	}
}

// TestClient: every call of the Go client on the real server and runtime,
// each JSON exchange held to the served OpenAPI document.
func TestClient(t *testing.T) {
	backends(t, func(t *testing.T, c *client.Client, s *testenv.Server, backend string) {
		ctx := context.Background()

		// The server on runsc has every capability; on pods, all but
		// memory checkpoints (and snapshots, with no registry to push to).
		info, err := c.Info(ctx)
		if err != nil || info.Backend != backend || !info.Has("fork") || !info.Has("stats") || !info.Has("runner") ||
			info.Has("checkpoint") != (backend == "gvisor") || (backend == "gvisor" && !info.Has("rootfs-diff")) {
			t.Errorf("info: %+v %v", info, err)
		}

		sb, err := c.Lease(ctx, client.LeaseRequest{TTLSec: 300, Metadata: map[string]string{"team": "a", "run": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		if sb.Metadata["team"] != "a" {
			t.Errorf("metadata on the lease answer: %+v", sb.Metadata)
		}
		other2, err := c.Lease(ctx, client.LeaseRequest{Metadata: map[string]string{"team": "b"}})
		if err != nil {
			t.Fatal(err)
		}
		if l, err := c.ListAll(ctx, client.ListOptions{Metadata: map[string]string{"team": "a"}}); err != nil || len(l) != 1 || l[0].ID != sb.ID {
			t.Errorf("list by metadata: %+v %v", l, err)
		}
		if m, err := c.SetMetadata(ctx, other2.ID, map[string]string{"team": "a", "x": "y"}); err != nil || m.Metadata["x"] != "y" {
			t.Errorf("set metadata: %+v %v", m, err)
		}
		if l, _ := c.ListAll(ctx, client.ListOptions{Metadata: map[string]string{"team": "a"}}); len(l) != 2 {
			t.Errorf("list after the change: %d", len(l))
		}
		if _, err := c.SetMetadata(ctx, other2.ID, map[string]string{"bad key": "v"}); client.StatusOf(err) != 400 {
			t.Errorf("a bad key: %v", err)
		}
		if g, _ := c.Get(ctx, other2.ID); g.Metadata["x"] != "y" {
			t.Errorf("metadata on get: %+v", g.Metadata)
		}
		c.End(ctx, other2.ID, false)
		if sb.Kind != "sandbox" || sb.Org != "acme" || sb.Status != "running" || sb.Expires().Sub(sb.Created()) < 295*time.Second || time.Until(sb.Expires()) <= 0 {
			t.Errorf("lease: %+v", sb)
		}
		if got, err := c.Get(ctx, sb.ID); err != nil || got.ID != sb.ID {
			t.Errorf("get: %+v %v", got, err)
		}
		if all, err := c.ListAll(ctx, client.ListOptions{Limit: 1}); err != nil || len(all) != 1 {
			t.Errorf("list: %v %v", all, err)
		}

		// exec: exit codes, stdin, timeouts; a non-zero exit is a result.
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "read x; echo got-$x; exit 3", Stdin: "hi\n"})
		if err != nil || r.ExitCode != 3 || r.Stdout != "got-hi\n" {
			t.Errorf("exec: %+v %v", r, err)
		}
		if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutSec: 1}); err != nil || !r.TimedOut || r.ExitCode != 124 {
			t.Errorf("exec past its timeout: %+v %v", r, err)
		}

		// A streamed exec: each line is seen before the program ends.
		var first time.Time
		lines := writerFunc(func(p []byte) (int, error) {
			if first.IsZero() {
				first = time.Now()
			}
			return len(p), nil
		})
		var streamed bytes.Buffer
		sr, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "for i in 1 2 3; do echo $i; sleep 1; done; echo bad >&2; exit 5"},
			io.MultiWriter(&streamed, lines), &streamed)
		end := time.Now()
		if err != nil || sr.ExitCode != 5 || streamed.String() != "1\n2\n3\nbad\n" || end.Sub(first) < 1500*time.Millisecond {
			t.Errorf("exec stream: %+v %v %q, first line %v before the end", sr, err, streamed.String(), end.Sub(first))
		}

		// Live stats, from the sandbox kernel's own counters and df inside.
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "head -c 3000000 /dev/zero > big3; (sleep 60 >/dev/null 2>&1 &)"}); err != nil {
			t.Fatal(err)
		}
		st, err := c.Stats(ctx, sb.ID)
		if err != nil || st.CPUSeconds == nil || *st.CPUSeconds <= 0 || *st.MemoryBytes <= 0 || *st.Processes < 2 || len(st.Disk) == 0 ||
			st.Disk[0].Path != sb.Workdir || st.Disk[0].UsedBytes < 2900000 {
			t.Errorf("stats: %+v %v", st, err)
		}

		// files: binary-safe both ways, and a directory.
		bin := []byte{0, 1, 2, 255, '\n', 0xc3, 0x28}
		if w, err := c.WriteFile(ctx, sb.ID, "d/bin.dat", bytes.NewReader(bin)); err != nil || w.Bytes != int64(len(bin)) {
			t.Fatalf("write: %+v %v", w, err)
		}
		f, err := c.ReadFile(ctx, sb.ID, "d/bin.dat")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, bin) || f.Dir || f.Size != int64(len(bin)) {
			t.Errorf("read back %q (dir %v, size %d)", got, f.Dir, f.Size)
		}
		if entries, err := c.ReadDir(ctx, sb.ID, "d"); err != nil || len(entries) != 1 || entries[0] != "bin.dat" {
			t.Errorf("readdir: %v %v", entries, err)
		}

		// A refusal carries the server's status and message unchanged.
		_, err = c.Lease(ctx, client.LeaseRequest{Class: "huge"})
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, "exec") {
			t.Errorf("a bad class: %v", err)
		}
		other := client.New(s.URL, s.Keys["globex"])
		if _, err := other.Get(ctx, sb.ID); !client.IsNotFound(err) {
			t.Errorf("another org's id: %v", err)
		}

		// The terminal: a command typed, its output read.
		term, err := c.Terminal(ctx, sb.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		term.Resize(100, 30)
		io.WriteString(term, "echo $((6*7))-$(tput cols)\r")
		if !readUntil(term, "42-100", 30*time.Second) {
			t.Error("the terminal never showed 42-100")
		}
		io.WriteString(term, "exit\r")
		io.Copy(io.Discard, term)
		if !strings.Contains(term.Reason(), "exited") {
			t.Errorf("the terminal's end: %q", term.Reason())
		}
		term.Close()

		// A session's live log, followed to the command's exit.
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo narrated", Session: "build"}); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var kinds []string
		err = c.Follow(fctx, "build", 0, func(ev client.Event) error {
			kinds = append(kinds, ev.Kind)
			if ev.Kind == "exit" {
				return io.EOF
			}
			return nil
		})
		cancel()
		if err != io.EOF || !strings.Contains(strings.Join(kinds, ","), "stdout") {
			t.Errorf("follow: %v %v", kinds, err)
		}

		// The interpreter.
		rc, err := c.RunCode(ctx, client.RunCodeRequest{Language: "py", Code: "open('o.txt','w').write('x'*3)\nprint(6*7)"})
		if err != nil || rc.Stdout != "42\n" || len(rc.Files) != 1 {
			t.Fatalf("run code: %+v %v", rc, err)
		}
		if up, err := c.Upload(ctx, rc.SandboxID, map[string]io.Reader{"in.txt": strings.NewReader("uploaded")}); err != nil || len(up) != 1 {
			t.Errorf("upload: %v %v", up, err)
		}
		if rd, err := c.Download(ctx, rc.SandboxID, "in.txt"); err != nil {
			t.Errorf("download: %v", err)
		} else if b, _ := io.ReadAll(rd); string(b) != "uploaded" {
			t.Errorf("download: %q", b)
		}

		// A directory as a tar, and back under another name.
		arc, err := c.Archive(ctx, sb.ID, "d", true)
		if err != nil {
			t.Fatal(err)
		}
		tgz, _ := io.ReadAll(arc)
		arc.Close()
		if x, err := c.Extract(ctx, sb.ID, "d2", bytes.NewReader(tgz)); err != nil || x.Entries < 1 {
			t.Errorf("extract: %+v %v", x, err)
		}
		if f, err := c.ReadFile(ctx, sb.ID, "d2/bin.dat"); err != nil {
			t.Errorf("the extracted file: %v", err)
		} else if b, _ := io.ReadAll(f); !bytes.Equal(b, bin) {
			t.Errorf("the extracted file: %q", b)
		}

		// The typed ops.
		if w, err := c.OpWrite(ctx, sb.ID, "typed.txt", "typed"); err != nil || w.Bytes != 5 {
			t.Errorf("op write: %+v %v", w, err)
		}
		if r, err := c.OpRead(ctx, sb.ID, "typed.txt"); err != nil || r.Data == nil || *r.Data != "typed" || r.Dir {
			t.Errorf("op read: %+v %v", r, err)
		}
		if r, err := c.OpRead(ctx, sb.ID, ""); err != nil || !r.Dir {
			t.Errorf("op read of the workdir: %+v %v", r, err)
		}
		if r, err := c.OpRun(ctx, sb.ID, client.ExecRequest{Command: "exit 9"}); err != nil || r.ExitCode != 9 {
			t.Errorf("op run: %+v %v", r, err)
		}
		if r, err := c.OpLease(ctx, sb.ID, client.LeaseRequest{TTLSec: 400}); err != nil || r.ID != sb.ID {
			t.Errorf("op lease: %+v %v", r, err)
		}

		// The operator's calls, with a key of the operator org.
		op := client.New(s.URL, s.Keys["system"])
		op.HTTP = c.HTTP
		two := 2
		if q, err := op.SetOrgQuota(ctx, "globex", client.Policy{Projects: &two}); err != nil || q.Override.Projects == nil || *q.Override.Projects != 2 {
			t.Errorf("set org quota: %+v %v", q, err)
		}
		if q, err := op.OrgQuota(ctx, "globex"); err != nil || *q.Effective.Projects != 2 {
			t.Errorf("org quota: %+v %v", q, err)
		}
		secret, k, err := op.MintKey(ctx, "globex", "ci", time.Hour)
		if err != nil || !strings.HasPrefix(secret, "sbk_") || k.ExpiresAt.IsZero() || k.Scope != "tenant" {
			t.Fatalf("mint key: %q %+v %v", secret, k, err)
		}
		if keys, err := op.Keys(ctx, "globex"); err != nil || len(keys) != 2 {
			t.Errorf("keys: %+v %v", keys, err)
		}
		// globex's own admin key manages globex's keys, and only those.
		adminSecret, ka, err := op.MintKeyScope(ctx, "globex", "ops", "admin", 0)
		if err != nil || ka.Scope != "admin" {
			t.Fatalf("mint an admin key: %+v %v", ka, err)
		}
		ga := client.New(s.URL, adminSecret)
		ga.HTTP = c.HTTP
		if keys, err := ga.Keys(ctx, "globex"); err != nil || len(keys) != 3 {
			t.Errorf("globex's keys by its admin: %+v %v", keys, err)
		}
		if _, err := ga.Keys(ctx, "acme"); client.StatusOf(err) != 403 {
			t.Errorf("acme's keys by globex's admin: %v", err)
		}
		if _, _, err := ga.MintKeyScope(ctx, "globex", "x", "root", 0); client.StatusOf(err) != 400 {
			t.Errorf("an unknown scope: %v", err)
		}
		if err := ga.RevokeKey(ctx, "globex", ka.ID); err != nil {
			t.Error(err)
		}
		if err := op.RevokeKey(ctx, "globex", k.ID); err != nil {
			t.Error(err)
		}
		if _, err := client.New(s.URL, secret).Quotas(ctx); client.StatusOf(err) != 401 {
			t.Errorf("a revoked key: %v", err)
		}
		if _, err := c.OrgQuota(ctx, "globex"); client.StatusOf(err) != 403 {
			t.Errorf("a tenant's key on an operator call: %v", err)
		}
		if u, err := c.Usage(ctx); err != nil || len(u) == 0 {
			t.Errorf("usage: %v %v", u, err)
		}

		// Lifecycle.
		if q, err := c.Quotas(ctx); err != nil || len(q) == 0 {
			t.Errorf("quotas: %v %v", q, err)
		}
		if r, err := c.Renew(ctx, sb.ID, 600); err != nil || time.Until(r.Expires()) < 590*time.Second {
			t.Errorf("renew: %+v %v", r, err)
		}
		if p, err := c.Sleep(ctx, sb.ID); err != nil || p.Status != "sleeping" {
			t.Errorf("pause: %+v %v", p, err)
		}
		if w, err := c.Wake(ctx, sb.ID); err != nil || w.Status != "running" {
			t.Errorf("resume: %+v %v", w, err)
		}
		if st, err := c.Stop(ctx, sb.ID); err != nil || st.ID != sb.ID {
			t.Errorf("stop: %+v %v", st, err)
		}
		if e, err := c.End(ctx, sb.ID, true); err != nil || !e.Ended {
			t.Errorf("end: %+v %v", e, err)
		}
		if _, err := c.Get(ctx, sb.ID); !client.IsNotFound(err) {
			t.Errorf("get after end: %v", err)
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// readUntil reads r until want shows or the time is up.
func readUntil(r io.Reader, want string, d time.Duration) bool {
	found := make(chan bool, 1)
	go func() {
		var seen []byte
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			seen = append(seen, buf[:n]...)
			if bytes.Contains(seen, []byte(want)) {
				found <- true
				return
			}
			if err != nil {
				found <- false
				return
			}
		}
	}()
	select {
	case ok := <-found:
		return ok
	case <-time.After(d):
		return false
	}
}
