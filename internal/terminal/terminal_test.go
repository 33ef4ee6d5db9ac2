package terminal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/sandboxd/sandbox/internal/files"
	"github.com/sandboxd/sandbox/internal/processes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/terminal"
	"github.com/sandboxd/sandbox/internal/ticket"
	"github.com/sandboxd/sandbox/internal/usage"
)

// A console runs the program, a socket's reader, writer and pinger on
// goroutines: all must end with the connection.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is the consoles over the real service, a real SQLite store and the
// fake runtime, behind the API's real handler (which owns the WebSocket
// side: frames, resize messages, tickets on the wire) on a real HTTP
// server.
type env struct {
	t    *testing.T
	url  string
	svc  *service.Service
	cons *terminal.Consoles
	rt   *fake.Runtime
	keys map[string]string
	pty  *pty
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
	log := slog.New(slog.DiscardHandler)
	svc := service.New(service.Config{StartTimeout: 5 * time.Second}, service.Deps{Store: st, Runtime: rt, Log: log, Quotas: st})
	fs := files.Join(svc, files.New(svc, 0, 0))
	it := interp.New(fs, service.Timeouts{}, nil, log)
	cons := terminal.New(svc, nil)
	h := api.New(api.Deps{Leases: svc, Work: svc, Files: fs.Files, Quotas: usage.New(quota.Policy{}, st, st, &quota.Commands{}), Operator: st, Consoles: cons, Interpreter: it,
		Ops: ops.New(fs, processes.New(svc, st, rt, nil, nil, "fake", nil, nil), nil, it), Auth: st, Keys: st, Backend: "fake"}, log, api.Config{})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Close)
	e := &env{t: t, url: srv.URL, svc: svc, cons: cons, rt: rt, keys: map[string]string{}, pty: newPTY()}
	for _, org := range []string{"acme", "globex"} {
		if e.keys[org], err = st.CreateKey(ctx, org, "test"); err != nil {
			t.Fatal(err)
		}
	}
	rt.SetExec(e.pty.exec)
	return e
}

// pty is the fake runtime's program for a terminal: it echoes stdin back
// to stdout, records the sizes it is sent, exits with the code a line
// "exit N" asks for, and says when its context was cancelled.
type pty struct {
	mu        sync.Mutex
	sizes     []runtime.Size
	req       chan runtime.ExecRequest
	cancelled chan struct{}
}

func newPTY() *pty {
	return &pty{req: make(chan runtime.ExecRequest, 8), cancelled: make(chan struct{}, 8)}
}

func (p *pty) exec(ctx context.Context, name string, req runtime.ExecRequest) error {
	if !req.TTY {
		return nil // the service's own programs
	}
	p.req <- req
	exit := make(chan int, 1)
	go func() {
		// Ends when the console closes stdin, after Exec has returned.
		b := make([]byte, 4096)
		for {
			n, err := req.Stdin.Read(b)
			if n > 0 {
				if code, ok := parseExit(string(b[:n])); ok {
					exit <- code
					return
				}
				req.Stdout.Write(b[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case sz := <-req.Resize:
			p.mu.Lock()
			p.sizes = append(p.sizes, sz)
			p.mu.Unlock()
		case code := <-exit:
			if code != 0 {
				return &runtime.ExitError{Code: code}
			}
			return nil
		case <-ctx.Done():
			p.cancelled <- struct{}{}
			return ctx.Err()
		}
	}
}

// parseExit reads the line "exit N".
func parseExit(s string) (int, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "exit ")
	var code int
	return code, ok && json.Unmarshal([]byte(rest), &code) == nil
}

func (p *pty) lastSizes() []runtime.Size {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]runtime.Size(nil), p.sizes...)
}

func (e *env) lease(org string) *sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.svc.Lease(orgCtx(org), service.LeaseRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func orgCtx(org string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org, Subject: "test"})
}

// mint asks the API for a ticket as org, answering its status and ticket.
func (e *env) mint(org, id string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/v1/sandbox/"+id+"/terminal/ticket", nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[org])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var tk terminal.TicketResult
	json.NewDecoder(res.Body).Decode(&tk)
	return res.StatusCode, tk.Ticket
}

// dial opens the terminal socket of sandbox id with tk.
func (e *env) dial(ctx context.Context, id, tk string) (*websocket.Conn, *http.Response, error) {
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/v1/sandbox/"+id+"/terminal/ws?ticket="+tk, nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return c, resp, err
}

// open mints a ticket as acme and opens the terminal of id with it.
func (e *env) open(ctx context.Context, id string) *websocket.Conn {
	e.t.Helper()
	status, tk := e.mint("acme", id)
	if status != http.StatusCreated {
		e.t.Fatalf("mint: %d", status)
	}
	c, _, err := e.dial(ctx, id, tk)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.CloseNow() })
	return c
}

// readUntil reads binary frames until their bytes hold want.
func readUntil(t *testing.T, ctx context.Context, c *websocket.Conn, want string) {
	t.Helper()
	var got bytes.Buffer
	for !strings.Contains(got.String(), want) {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read (so far %q): %v", got.String(), err)
		}
		if typ != websocket.MessageBinary {
			t.Fatalf("a %v frame, want binary", typ)
		}
		got.Write(b)
	}
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEchoResizeAndClose(t *testing.T) {
	e := newEnv(t)
	sb := e.lease("acme")
	ctx := timeout(t)
	c := e.open(ctx, sb.ID)

	// The console ran a login shell on a pty.
	var req runtime.ExecRequest
	select {
	case req = <-e.pty.req:
	case <-ctx.Done():
		t.Fatal("no program started")
	}
	if !req.TTY || len(req.Argv) < 3 || req.Argv[0] != "sh" || !strings.Contains(req.Argv[2], "exec sh -l") {
		t.Fatalf("exec %q tty=%v, want the login shell on a pty", req.Argv, req.TTY)
	}

	// Typed bytes reach the program's stdin, its stdout comes back.
	if err := c.Write(ctx, websocket.MessageBinary, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, ctx, c, "hello\n")

	// A resize message reaches the program as a size, not as input; a
	// text frame that is not exactly a resize is input.
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"resize":{"cols":120,"rows":40}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"resize":{"cols":0,"rows":40}}`)); err != nil {
		t.Fatal(err)
	}
	readUntil(t, ctx, c, `{"resize":{"cols":0,"rows":40}}`)
	// The size goes to the program on a channel of its own, and may be
	// taken after the input that followed it is echoed: wait for it.
	got := e.pty.lastSizes()
	for len(got) == 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		got = e.pty.lastSizes()
	}
	if len(got) != 1 || got[0] != (runtime.Size{Cols: 120, Rows: 40}) {
		t.Fatalf("sizes %v, want [{120 40}]", got)
	}

	// Closing the socket cancels the program.
	c.Close(websocket.StatusNormalClosure, "bye")
	select {
	case <-e.pty.cancelled:
	case <-ctx.Done():
		t.Fatal("closing the socket did not cancel the program")
	}
}

func TestShellExitClosesSocket(t *testing.T) {
	e := newEnv(t)
	sb := e.lease("acme")
	ctx := timeout(t)
	c := e.open(ctx, sb.ID)
	if err := c.Write(ctx, websocket.MessageBinary, []byte("exit 5\n")); err != nil {
		t.Fatal(err)
	}
	// The shell's exit code is the close's reason, with a normal closure.
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "the shell exited (5)" {
		t.Fatalf("read after exit: %v", err)
	}
}

func TestTicketRefusals(t *testing.T) {
	e := newEnv(t)
	sb := e.lease("acme")
	other := e.lease("acme")
	ctx := timeout(t)

	// No ticket, a made-up one: 401, no upgrade.
	for _, tk := range []string{"", "tk_madeup"} {
		if _, resp, err := e.dial(ctx, sb.ID, tk); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("ticket %q: %v, %v", tk, err, resp)
		}
	}
	// A ticket is for one sandbox: another's socket refuses it (and it is
	// spent by the try).
	_, tk := e.mint("acme", sb.ID)
	if _, resp, err := e.dial(ctx, other.ID, tk); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a ticket for another sandbox: %v", err)
	}
	if _, resp, err := e.dial(ctx, sb.ID, tk); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a ticket spent on a wrong try: %v", err)
	}
	// Single use: the second dial with one ticket is refused.
	_, tk = e.mint("acme", sb.ID)
	c, _, err := e.dial(ctx, sb.ID, tk)
	if err != nil {
		t.Fatal(err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	if _, resp, err := e.dial(ctx, sb.ID, tk); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a ticket used twice: %v", err)
	}
	// Another org cannot mint a ticket for acme's sandbox: not found.
	if status, _ := e.mint("globex", sb.ID); status != http.StatusNotFound {
		t.Fatalf("globex's ticket for acme's sandbox: %d", status)
	}
	// With no key, none at all.
	res, err := http.Post(e.url+"/v1/sandbox/"+sb.ID+"/terminal/ticket", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a ticket without a key: %d", res.StatusCode)
	}
}

// The consoles without the socket: what the package itself decides.
func TestConsoles(t *testing.T) {
	e := newEnv(t)
	sb := e.lease("acme")
	acme := orgCtx("acme")

	_, err := e.cons.Ticket(context.Background(), sb.ID, ticket.Terminal)
	wantKind(t, err, sandbox.KindUnauthorized)
	_, err = e.cons.Ticket(orgCtx("globex"), sb.ID, ticket.Terminal)
	wantKind(t, err, sandbox.KindNotFound)
	// An exec sandbox has no display.
	_, err = e.cons.Ticket(acme, sb.ID, ticket.Screen)
	wantKind(t, err, sandbox.KindConflict)

	// A spent ticket grants its org's context, as a ticket's principal.
	tk, err := e.cons.Ticket(acme, sb.ID, ticket.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.cons.Spend(context.Background(), tk, sb.ID, ticket.Screen)
	wantKind(t, err, sandbox.KindUnauthorized) // another kind spends it
	tk, _ = e.cons.Ticket(acme, sb.ID, ticket.Terminal)
	ctx, err := e.cons.Spend(context.Background(), tk, sb.ID, ticket.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := sandbox.PrincipalFrom(ctx); !ok || p.Org != "acme" || p.Subject != "ticket" {
		t.Fatalf("spent ticket's principal %+v", p)
	}

	// A tmux session name is checked before anything runs.
	_, err = e.cons.Terminal(acme, sb.ID, "bad name;rm", strings.NewReader(""), io.Discard, nil)
	wantKind(t, err, sandbox.KindInvalid)
	select {
	case <-e.pty.req:
		t.Fatal("a terminal with a bad session name ran")
	default:
	}

	// A client that goes away is not an error: code 0, nil.
	cctx, cancel := context.WithCancel(acme)
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		code, err := e.cons.Terminal(cctx, sb.ID, "main", pr, io.Discard, nil)
		if err == nil && code != 0 {
			err = errors.New("non-zero code")
		}
		done <- err
	}()
	req := <-e.pty.req
	if n := len(req.Argv); req.Argv[n-1] != "main" {
		t.Fatalf("tmux session not passed: %q", req.Argv)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a cancelled terminal: %v", err)
	}
	select {
	case <-e.pty.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the program's context was not cancelled")
	}
	pr.Close() // ends the program's stdin copy
}

func wantKind(t *testing.T, err error, k sandbox.Kind) {
	t.Helper()
	if err == nil || sandbox.KindOf(err) != k {
		t.Fatalf("error %v (kind %v), want kind %v", err, sandbox.KindOf(err), k)
	}
}
