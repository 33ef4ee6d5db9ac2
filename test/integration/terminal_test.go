package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/store"
)

// ticketFor mints a ticket for kind on id as org.
func (e *env) ticketFor(org, id, kind string) (string, map[string]any) {
	e.t.Helper()
	r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/"+kind+"/ticket", org, nil).JSON(e.t)
	return r["ticket"].(string), r
}

func (e *env) wsURL(id, kind, ticket, arg string) string {
	u := "ws" + strings.TrimPrefix(e.http.URL, "http") + "/v1/sandbox/" + id + "/" + kind + "/ws?ticket=" + ticket
	if arg != "" {
		u += "&arg=" + arg
	}
	return u
}

// term is a test client of the terminal socket.
type term struct {
	t   *testing.T
	c   *websocket.Conn
	out strings.Builder
}

func (e *env) dialTerm(t *testing.T, id, ticket, arg string) (*term, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, e.wsURL(id, "terminal", ticket, arg), nil)
	if err != nil {
		return nil, res, err
	}
	c.SetReadLimit(1 << 22)
	return &term{t: t, c: c}, res, nil
}

func (k *term) send(typ websocket.MessageType, s string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.c.Write(ctx, typ, []byte(s)); err != nil {
		k.t.Fatalf("write: %v", err)
	}
}

// expect reads output until it contains want; every output frame must be
// binary.
func (k *term) expect(want string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(k.out.String(), want) {
		typ, b, err := k.c.Read(ctx)
		if err != nil {
			k.t.Fatalf("waiting for %q: %v; output so far: %q", want, err, k.out.String())
		}
		if typ != websocket.MessageBinary {
			k.t.Fatalf("output came in a %v frame: %q", typ, b)
		}
		k.out.Write(b)
	}
}

// resized sends a resize to rows×cols and, at once, a stty that must see
// it: a resize is ordered with the keys after it (on Kubernetes the runner
// holds the terminal and takes both from one stream).
func (k *term) resized(rows, cols int) {
	k.t.Helper()
	k.send(websocket.MessageText, fmt.Sprintf(`{"resize":{"cols":%d,"rows":%d}}`, cols, rows))
	k.send(websocket.MessageBinary, "stty size\r")
	k.expect(fmt.Sprintf("%d %d", rows, cols))
}

// expectSize sends a resize to rows×cols and waits for the pty to say so,
// on a backend whose resize travels beside the input: Kubernetes without
// the runner (the exec's resize channel, applied by the node while the
// shell already reads), where a stty typed at once may run before it
// lands. It is asked again, every second and a half, until it says the
// new size. (A read past its context closes the connection, so the asking
// is beside the one read.)
func (k *term) expectSize(rows, cols int) {
	k.t.Helper()
	k.send(websocket.MessageText, fmt.Sprintf(`{"resize":{"cols":%d,"rows":%d}}`, cols, rows))
	done := make(chan struct{})
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := k.c.Write(ctx, websocket.MessageBinary, []byte("stty size\r"))
			cancel()
			if err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(1500 * time.Millisecond):
			}
		}
	}()
	defer func() { close(done); <-asked }()
	k.expect(fmt.Sprintf("%d %d", rows, cols))
}

func dialStatus(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}

// TestTerminal: a command typed and its output read from binary frames; a
// resize reaching the pty; a text frame that is not a resize is stdin;
// every ticket refusal (no upgrade); a bad arg does not spend the ticket;
// a tmux session survives a disconnect and is re-attached with a second
// ticket; a connected terminal extends the lease.
func TestTerminal(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackendsWith(t, server.Config{}, []string{"dev"}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"class": "dev", "project": "term", "ttlSec": 60})
		before := unixTime(t, e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)["expiresAt"])

		// A sleeping sandbox is woken when its ticket is minted.
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		tk, body := e.ticketFor("acme", id, "terminal")
		if st := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)["status"]; st != "running" {
			t.Fatalf("after a ticket for a sleeping sandbox: %v", st)
		}
		if body["expiresIn"] != float64(30) || body["url"] != "/v1/sandbox/"+id+"/terminal?ticket="+tk {
			t.Errorf("ticket answer: %v", body)
		}
		// A bad arg is refused before the ticket is looked at...
		if _, res, err := e.dialTerm(t, id, tk, "-bad"); err == nil || dialStatus(res) != http.StatusBadRequest {
			t.Fatalf("bad arg: %v %d", err, dialStatus(res))
		}
		// ...so the same ticket still opens the terminal.
		k, _, err := e.dialTerm(t, id, tk, "")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		k.resized(41, 123)
		k.send(websocket.MessageBinary, "echo \"term=$TERM shell=$0\"\r")
		k.expect("term=xterm")
		k.expect("shell=zsh") // zsh first
		k.send(websocket.MessageBinary, "[[ -o login ]] && echo login-shell\r")
		k.expect("login-shell")
		k.send(websocket.MessageText, "echo text-$((6*7))\r")
		k.expect("text-42")
		// A job in the terminal's foreground goes with the terminal, once
		// it runs. A line typed an instant before the close is a known gap
		// on gVisor: the shell forks its job after the hangup, and the job,
		// not yet its program, takes the hangup in the shell's handler it
		// still has, then runs on (seen under load, 1 run in 3).
		k.send(websocket.MessageBinary, "echo started-$((6*7)); sleep 4321\r")
		k.expect("started-42")
		sleeping := "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^sleep 4321' && echo $p; done; true"
		for deadline := time.Now().Add(20 * time.Second); e.sh("acme", id, sleeping) == ""; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the terminal's foreground job did not start")
			}
		}
		k.c.Close(websocket.StatusNormalClosure, "")
		closed := time.Now()
		for deadline := closed.Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			left := e.sh("acme", id, sleeping)
			if left == "" {
				t.Logf("the foreground job went %v after the terminal closed", time.Since(closed).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the closed terminal's foreground job still runs: %q", left)
				break
			}
		}

		// Refusals: spent, missing, forged, for another sandbox, for the
		// screen; another org cannot mint one at all.
		other := e.lease("acme", map[string]any{"class": "dev", "project": "other"})
		tk2, _ := e.ticketFor("acme", other, "terminal")
		for name, ticket := range map[string]string{"spent": tk, "missing": "", "forged": "tk_" + strings.Repeat("a", 52), "other sandbox": tk2} {
			if _, res, err := e.dialTerm(t, id, ticket, ""); err == nil || dialStatus(res) != http.StatusUnauthorized {
				t.Errorf("%s ticket: %v, status %d", name, err, dialStatus(res))
			}
		}
		if _, res, err := e.dialTerm(t, other, tk2, ""); err == nil || dialStatus(res) != http.StatusUnauthorized {
			t.Errorf("a ticket refused once opened later: %v %d", err, dialStatus(res))
		}
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/terminal/ticket", "globex", nil)
		e.must(http.StatusConflict, "POST", "/v1/sandbox/"+id+"/screen/ticket", "acme", nil) // dev has no display
		e.must(http.StatusUnauthorized, "POST", "/v1/sandbox/"+id+"/terminal/ticket", "", nil)

		// tmux: state survives a disconnect and a second ticket re-attaches.
		tk, _ = e.ticketFor("acme", id, "terminal")
		k, _, err = e.dialTerm(t, id, tk, "work")
		if err != nil {
			t.Fatal(err)
		}
		k.send(websocket.MessageBinary, "MARK=persisted-$((40+2)); echo set-$MARK\r")
		k.expect("set-persisted-42")
		k.c.CloseNow() // an abrupt disconnect
		tk, _ = e.ticketFor("acme", id, "terminal")
		k, _, err = e.dialTerm(t, id, tk, "work")
		if err != nil {
			t.Fatal(err)
		}
		k.send(websocket.MessageBinary, "echo again-$MARK\r")
		k.expect("again-persisted-42")
		k.c.Close(websocket.StatusNormalClosure, "")

		after := unixTime(t, e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)["expiresAt"])
		if !after.After(before) {
			t.Errorf("a connected terminal did not extend the lease: %s -> %s", before, after)
		}
	})
}

// TestTerminalPage: the page is self-contained (no other origin), framed
// only as configured, and the ticket does not leak through a referrer.
func TestTerminalPage(t *testing.T) {
	e := newEnv(t)
	for _, kind := range []string{"terminal", "screen"} {
		r := e.must(http.StatusOK, "GET", "/v1/sandbox/sb_any/"+kind+"?ticket=x", "", nil)
		csp := r.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'self'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s CSP: %s", kind, csp)
		}
		if r.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s referrer policy: %q", kind, r.Header.Get("Referrer-Policy"))
		}
		page := string(r.Body)
		for _, bad := range []string{"src=\"http", "href=\"http", "src=\"//", "<link", "sourceMappingURL="} {
			if strings.Contains(page, bad) {
				t.Errorf("%s page loads from elsewhere: contains %q", kind, bad)
			}
		}
	}
}

// TestRevokedKeyEndsItsConnections: revoking a key (as the CLI does, on the
// store) makes its next call a 401 and ends, within seconds, the terminal
// and the event stream it opened, saying why; another key's terminal stays.
func TestRevokedKeyEndsItsConnections(t *testing.T) {
	defer func(d time.Duration) { keywatch.Every = d }(keywatch.Every)
	keywatch.Every = 200 * time.Millisecond
	e := newEnv(t)
	ctx := context.Background()
	secret, k, err := e.srv.Store.MintKey(ctx, "acme", "doomed", store.ScopeTenant, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	e.keys["doomed"] = secret // the env's calls send this key as org "doomed"
	id := e.lease("doomed", nil)
	tk, _ := e.ticketFor("doomed", id, "terminal")
	doomed, _, err := e.dialTerm(t, id, tk, "")
	if err != nil {
		t.Fatal(err)
	}
	tk2, _ := e.ticketFor("acme", id, "terminal")
	kept, _, err := e.dialTerm(t, id, tk2, "")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", e.http.URL+"/v1/sessions/rev/events", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %v %v", err, stream)
	}
	defer stream.Body.Close()

	if err := e.srv.Store.RevokeKey(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/v1/sandbox/"+id, "doomed", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("a revoked key's next call: %d %s", r.Status, r.Body)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	for {
		_, _, err := doomed.c.Read(rctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "revoked") {
				t.Errorf("the revoked key's terminal ended with %v", err)
			}
			break
		}
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the terminal took %v to end", time.Since(start))
	}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, stream.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the revoked key's event stream is still open")
	}
	kept.send(websocket.MessageBinary, "echo still-$((1+1))\r")
	kept.expect("still-2")
	kept.c.Close(websocket.StatusNormalClosure, "")
}
