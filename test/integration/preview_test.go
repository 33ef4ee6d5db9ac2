package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/service"
)

// devServer is a dev server from Python's standard library alone, on port
// 8000: / is a page whose script opens a live-reload-like WebSocket to
// ./live (relative, so it works under either preview form) and keeps what
// comes back; /live is that socket, echoing each text message; /headers
// answers the request's headers, as the app saw them.
const devServer = `import base64, hashlib, http.server, struct
PAGE = b"""<!doctype html><title>dev app</title><h1 id=h>hello from the sandbox</h1>
<script>
window.state = {open: false, closed: false, echoes: []};
const base = location.origin + location.pathname.replace(/[^/]*$/, "");
window.ws = new WebSocket(base.replace(/^http/, "ws") + "live");
ws.onopen = () => { state.open = true; ws.send("reload?"); };
ws.onmessage = e => state.echoes.push(e.data);
ws.onclose = () => state.closed = true;
document.cookie = "app=kept; path=/";
fetch(base + "headers").then(r => r.text()).then(t => window.seen = t);
</script>"""
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.socket()
        if self.path.endswith("headers"):
            body = "".join(k + ": " + v + "\n" for k, v in self.headers.items()).encode()
            ctype = "text/plain"
        else:
            body, ctype = PAGE, "text/html"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def socket(self):
        key = self.headers["Sec-WebSocket-Key"].encode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode())
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2 or h[0] & 0x0f == 8:
                break
            n = h[1] & 0x7f
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            mask = r.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            w.write(bytes([0x81, len(data)]) + data)
            w.flush()
        self.close_connection = True
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

// previewLink mints a link to port of id as org.
func (e *env) previewLink(org, id string, port int, ttlSec int) map[string]any {
	e.t.Helper()
	r := e.must(http.StatusCreated, "POST", fmt.Sprintf("/v1/sandbox/%s/ports/%d/link", id, port), org, map[string]any{"ttlSec": ttlSec})
	return r.JSON(e.t)
}

// serverPort is the port of the test's listener.
func (e *env) serverPort() string {
	u, _ := url.Parse(e.http.URL)
	return u.Port()
}

// waitListening waits until port answers through the path form.
func (e *env) waitListening(org, id string, port int) {
	e.t.Helper()
	for range 300 { // 30 s: the tests beside it (parallel_test.go) slow a start

		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/sandbox/%s/ports/%d/", e.http.URL, id, port), nil)
		req.Header.Set("Authorization", "Bearer "+e.keys[org])
		if e.host != "" {
			req.Host = e.host
		}
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("nothing answered on port %d of %s", port, id)
}

// TestPreviewInBrowser: a dev server inside a sandbox, opened in a
// real Chromium through a preview link — its host-form URL, and the path
// form with the token (as links were before they were host-form only),
// which lands on the host form: the page loads, the link's token is gone
// from the address bar (a cookie holds the access, out of the page's
// reach), a live-reload WebSocket opens, stays up and echoes, the app sees
// its own cookie but never the preview's, and a reload works on the
// cookie alone.
func TestPreviewInBrowser(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", devServer}})
		e.waitListening("acme", id, 8000)
		ctx, cancel := browser(t)
		defer cancel()

		link := e.previewLink("acme", id, 8000, 300)
		hostURL, pathURL := link["url"].(string), link["pathUrl"].(string)
		wantHost := "http://8000-" + hostLabel(id) + ".localhost:" + e.serverPort() + "/?preview_token="
		if !strings.HasPrefix(hostURL, wantHost) || pathURL != e.http.URL+"/v1/sandbox/"+id+"/ports/8000/" {
			t.Fatalf("link URLs: %q %q", hostURL, pathURL)
		}
		hostAfter := "http://8000-" + hostLabel(id) + ".localhost:" + e.serverPort() + "/"
		for _, form := range []struct{ name, url, after string }{
			{"host form", hostURL, hostAfter},
			{"path form", pathURL + "?" + hostURL[strings.Index(hostURL, "?")+1:], hostAfter},
		} {
			t.Run(form.name, func(t *testing.T) { browsePreview(t, ctx, form.url, form.after) })
		}

		// A browser with no link gets the server's page, not the app.
		step := chromedp.Do(ctx, chromedp.Navigate("http://8000-"+id+".localhost:"+e.serverPort()+"/?preview_token=spv2.forged.x"))
		if step != nil {
			t.Fatal(step)
		}
		if err := waitPage(ctx, `document.title.startsWith("401")`, 10*time.Second); err != nil {
			t.Errorf("a forged link in a browser: %v", err)
		}
	})
}

// browsePreview opens url, a preview of devServer, in the browser of ctx
// and checks what a user of the app sees: the page loads at after (a
// link's token dropped from the address bar), its live-reload WebSocket
// opens, stays up and echoes, neither the page's script nor the app ever
// sees the preview's credential, the app's own cookie reaches it, and a
// reload works on the preview's cookie alone.
func browsePreview(t *testing.T, ctx context.Context, url, after string) {
	t.Helper()
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML + " " + JSON.stringify(window.state || null)`))
			t.Fatalf("%s: %v (page: %.600s)", what, err, text)
		}
	}
	step("navigate", chromedp.Do(ctx, chromedp.Navigate(url)))
	step("page and socket", waitPage(ctx, `window.state && state.open && state.echoes.includes("reload?") && window.seen !== undefined`, 30*time.Second))
	loc, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	if loc != after {
		t.Errorf("after the first visit the page is at %q, want %q (the token dropped)", loc, after)
	}
	if c, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); carriesPreviewCredential(c) {
		t.Errorf("the page's script reads the preview cookie: %q", c)
	}
	seen, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`window.seen`))
	if carriesPreviewCredential(seen) {
		t.Errorf("the app saw the preview's credential: %q", seen)
	}
	// The socket stays up across a pause and keeps echoing.
	time.Sleep(2 * time.Second)
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(ws.send("again"), true)`))
	step("send again", err)
	step("second echo", waitPage(ctx, `state.echoes.includes("again") && !state.closed`, 15*time.Second))
	// A reload carries no token: the cookie alone admits it.
	step("reload", chromedp.Do(ctx, chromedp.Navigate(after)))
	step("page after reload", waitPage(ctx, `window.state && state.open && document.getElementById("h").textContent === "hello from the sandbox" && window.seen !== undefined`, 30*time.Second))
	seen, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`window.seen`))
	if !strings.Contains(seen, "app=kept") {
		t.Errorf("the app's own cookie did not reach it: %q", seen)
	}
	if carriesPreviewCredential(seen) {
		t.Errorf("the app saw the preview's credential after a reload: %q", seen)
	}
}

// carriesPreviewCredential says whether s (cookies, or the headers an app
// saw) holds any form of a preview's credential: its cookie, a link's
// token (spv2.…) or its query parameter, or an Authorization header. A
// bare "spv" is no sign: a sandbox id in a Host header can hold it.
func carriesPreviewCredential(s string) bool {
	l := strings.ToLower(s)
	return strings.Contains(l, "sandbox_preview") || strings.Contains(l, "spv2.") ||
		strings.Contains(l, "preview_token") || strings.Contains(l, "authorization")
}

// fetchPreview sends one request with no client-side redirects.
// hostLabel is sandbox id's spelling in a preview's host name: the id with
// '-' for its '_' ("sb-…"), a DNS-safe label.
func hostLabel(id string) string { return strings.Replace(id, "_", "-", 1) }

func fetchPreview(t *testing.T, method, u string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestPreviewLinks: a link's first visit on the host form sets a
// host-only cookie and redirects to the URL without the token; the cookie
// then admits host-form requests; on the path form a token is sent on to
// the host form and a cookie admits nothing; an expired, altered,
// other-port, other-sandbox or other-org link is refused (401, or 404 for
// a sandbox that is not the link's org's), and so is every link once the
// sandbox ends. Neither the key nor the preview cookie reaches the app; a
// stopped listener is a 502 (a page for a browser, JSON otherwise).
func TestPreviewLinks(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		other := e.lease("acme", map[string]any{"ttlSec": 600})
		foreign := e.lease("globex", map[string]any{"ttlSec": 600})
		srv := e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", echoServer}})
		e.waitListening("acme", id, 8001)
		host := "8001-" + hostLabel(id) + ".localhost:" + e.serverPort()
		link := e.previewLink("acme", id, 8001, 300)
		tok := strings.TrimPrefix(link["url"].(string), "http://"+host+"/?preview_token=")
		if !strings.HasPrefix(tok, "spv2.") {
			t.Fatalf("link: %v", link)
		}
		if exp := int64(link["expiresAt"].(float64)); exp < time.Now().Add(290*time.Second).Unix() || exp > time.Now().Add(301*time.Second).Unix() {
			t.Errorf("expiresAt %d for a ttl of 300 s", exp)
		}

		// The first visit, in each form: a cookie for that preview, and a
		// redirect that keeps the other query parameters.
		res, _ := fetchPreview(t, "GET", e.http.URL+"/some/page?q=1&preview_token="+tok, http.Header{"Host": {host}})
		c := res.Cookies()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/some/page?q=1" || len(c) != 1 {
			t.Fatalf("host form's first visit: %d %q %v", res.StatusCode, res.Header.Get("Location"), res.Header["Set-Cookie"])
		}
		if c[0].Name != "sandbox_preview" || !c[0].HttpOnly || c[0].SameSite != http.SameSiteLaxMode || c[0].Path != "/" || c[0].Domain != "" || c[0].Expires.Unix() != int64(link["expiresAt"].(float64)) {
			t.Errorf("host form's cookie: %+v", c[0])
		}
		cookie := c[0].Name + "=" + c[0].Value
		res, _ = fetchPreview(t, "GET", e.http.URL+"/v1/sandboxes/"+id+"/ports/8001/x?preview_token="+tok, nil)
		if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != "http://"+host+"/x?preview_token="+tok || len(res.Cookies()) != 0 {
			t.Errorf("path form with a token: %d %q %v", res.StatusCode, res.Header.Get("Location"), res.Header["Set-Cookie"])
		}

		// The cookie admits; the app sees neither it nor a key, but its own
		// cookies.
		res, body := fetchPreview(t, "GET", e.http.URL+"/some/page?q=1", http.Header{"Host": {host}, "Cookie": {"app=1; " + cookie}})
		if res.StatusCode != 200 || !strings.HasPrefix(body, "GET /some/page?q=1 HTTP/1.1\n") || !strings.Contains(body, "Cookie: app=1\n") || carriesPreviewCredential(body) {
			t.Errorf("with the cookie, host form: %d %q", res.StatusCode, body)
		}
		res, body = fetchPreview(t, "GET", e.http.URL+"/", http.Header{"Host": {host}, "Authorization": {"Bearer " + e.keys["acme"]}})
		if res.StatusCode != 200 || strings.Contains(strings.ToLower(body), "authorization") || strings.Contains(body, e.keys["acme"]) {
			t.Errorf("with the key, host form: %d %q", res.StatusCode, body)
		}
		res, body = fetchPreview(t, "GET", e.http.URL+"/v1/sandbox/"+id+"/ports/8001/p", http.Header{"Cookie": {cookie}})
		if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != "http://"+host+"/p" || strings.Contains(body, "GET /p") {
			t.Errorf("with the cookie, path form: %d %q", res.StatusCode, body)
		}

		// Refusals.
		key, err := preview.LoadKey(e.data) // the server's own secret, to forge what only a leak could
		if err != nil {
			t.Fatal(err)
		}
		sig := tok[strings.LastIndex(tok, ".")+1:]
		altered := tok[:strings.LastIndex(tok, ".")+1] + strings.Map(func(r rune) rune {
			if r == 'A' {
				return 'B'
			}
			return 'A'
		}, sig[:1]) + sig[1:]
		for _, c := range []struct {
			name string
			url  string
			host string
			want int
		}{
			{"no credential", e.http.URL + "/", host, 401},
			{"expired", e.http.URL + "/?preview_token=" + key.Mint(preview.Claims{Org: "acme", ID: id, Port: 8001, Expires: time.Now().Add(-time.Second)}), host, 401},
			{"altered", e.http.URL + "/?preview_token=" + altered, host, 401},
			{"another port", e.http.URL + "/?preview_token=" + tok, "8002-" + hostLabel(id) + ".localhost", 401},
			{"another sandbox", e.http.URL + "/?preview_token=" + tok, "8001-" + other + ".localhost", 401},
			{"another org's sandbox", e.http.URL + "/?preview_token=" + tok, "8001-" + foreign + ".localhost", 401},
			{"signed for an org the sandbox is not of", e.http.URL + "/?preview_token=" + key.Mint(preview.Claims{Org: "globex", ID: id, Port: 8001, Expires: time.Now().Add(time.Minute)}), host, 404},
		} {
			res, body := fetchPreview(t, "GET", c.url, http.Header{"Host": {c.host}})
			if res.StatusCode != c.want || len(res.Cookies()) != 0 || strings.Contains(body, "GET /") {
				t.Errorf("%s: %d %v %q, want %d", c.name, res.StatusCode, res.Header["Set-Cookie"], body, c.want)
			}
		}
		if r := e.do("POST", "/v1/sandbox/"+id+"/ports/8001/link", "globex", nil); r.Status != http.StatusNotFound {
			t.Errorf("another org mints a link to acme's sandbox: %d", r.Status)
		}
		if r := e.do("POST", "/v1/sandbox/"+id+"/ports/8001/link", "acme", map[string]any{"ttlSec": -1}); r.Status != http.StatusBadRequest {
			t.Errorf("a negative ttl: %d", r.Status)
		}
		if l := e.previewLink("acme", id, 8001, 10*86400); int64(l["expiresAt"].(float64)) > time.Now().Add(601*time.Second).Unix() {
			t.Errorf("a link outlives its lease: %v", l["expiresAt"])
		}

		// A listener that stops: 502 at once, a page for a browser.
		e.must(http.StatusOK, "POST", fmt.Sprintf("/v1/sandbox/%s/processes/%d/signal", id, srv.Pid), "acme", map[string]any{"signal": "KILL"})
		e.waitProcess("acme", id, srv.Pid)
		res, body = fetchPreview(t, "GET", e.http.URL+"/", http.Header{"Host": {host}, "Cookie": {cookie}, "Accept": {"text/html,application/xhtml+xml"}})
		if res.StatusCode != http.StatusBadGateway || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "nothing listens on port 8001") {
			t.Errorf("a stopped listener, in a browser: %d %q %q", res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		res, body = fetchPreview(t, "GET", e.http.URL+"/v1/sandbox/"+id+"/ports/8001/", http.Header{"Authorization": {"Bearer " + e.keys["acme"]}})
		var msg map[string]string
		if res.StatusCode != http.StatusBadGateway || json.Unmarshal([]byte(body), &msg) != nil || !strings.Contains(msg["error"], "nothing listens on port 8001") {
			t.Errorf("a stopped listener, to an API caller: %d %q", res.StatusCode, body)
		}

		// Ending the sandbox revokes its links.
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
		if res, _ := fetchPreview(t, "GET", e.http.URL+"/", http.Header{"Host": {host}, "Cookie": {cookie}}); res.StatusCode != http.StatusNotFound {
			t.Errorf("a link after the end: %d", res.StatusCode)
		}
	})
}

// TestPreviewWakes: a preview is use of the sandbox — it stamps
// lastUsedAt (what the idle sleep reads) and wakes a sleeping sandbox, the
// server inside answering again from the memory the sleep kept.
func TestPreviewWakes(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		e.sh("acme", id, "echo awake > hello.txt")
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
		e.waitListening("acme", id, 8000)
		before := int64(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)["lastUsedAt"].(float64))
		time.Sleep(1100 * time.Millisecond) // lastUsedAt is in seconds
		link := e.previewLink("acme", id, 8000, 300)
		tok := link["url"].(string)[strings.Index(link["url"].(string), "preview_token=")+len("preview_token="):]
		cookie := http.Header{"Cookie": {"sandbox_preview=" + tok}, "Host": {"8000-" + hostLabel(id) + ".localhost"}}
		if res, body := fetchPreview(t, "GET", e.http.URL+"/hello.txt", cookie); res.StatusCode != 200 || body != "awake\n" {
			t.Fatalf("through the link: %d %q", res.StatusCode, body)
		}
		if after := int64(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)["lastUsedAt"].(float64)); after <= before {
			t.Errorf("a preview did not stamp lastUsedAt: %d then %d", before, after)
		}

		// The relay of the last request ends just after its answer; until
		// then it is work in flight, which a sleep waits for.
		var r resp
		for range 150 {
			if r = e.do("POST", "/v1/sandbox/"+id+"/pause", "acme", nil); r.Status != http.StatusConflict {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		slept := r.JSON(t)
		if r.Status != 200 || slept["status"] != "sleeping" {
			t.Fatalf("pause: %d %v", r.Status, slept)
		}
		res, body := fetchPreview(t, "GET", e.http.URL+"/hello.txt", cookie)
		sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)
		if sb["status"] != "running" {
			t.Fatalf("a preview of a sleeping sandbox left it %v", sb["status"])
		}
		e.need(t, runtime.CapCheckpoint, "the server inside answers the preview that woke it only where the sleep kept its memory")
		// gVisor checkpoints a sleeping sandbox (TestSleepAndWake): the server
		// inside comes back with the memory and answers the preview that woke
		// it. A 502 here would be a sleep that lost the memory.
		if slept["memoryKept"] != true {
			t.Errorf("the sleep did not keep the memory: %v", slept)
		}
		if res.StatusCode != 200 || body != "awake\n" {
			t.Errorf("the preview that woke the sandbox: %d %q, want the server inside to answer", res.StatusCode, body)
		}
	})
}

// TestPreviewPublicOnRunsc: a lease asking for public ports is refused
// unless the operator allows them; allowed, the asked port is open to a
// request with no credential on the host form (the path form sends it
// there), and no other port is.
func TestPreviewPublicOnRunsc(t *testing.T) {
	closed := newEnv(t)
	r := closed.do("POST", "/v1/sandbox", "acme", map[string]any{"publicPorts": []int{8000}})
	if r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "--public-previews") {
		t.Errorf("public ports on a server that allows none: %d %s", r.Status, r.Body)
	}

	e := newEnvConfig(t, server.Config{Service: service.Config{PublicPreviews: true}})
	if r := e.do("POST", "/v1/sandbox", "acme", map[string]any{"publicPorts": []int{0}}); r.Status != http.StatusBadRequest {
		t.Errorf("public port 0: %d %s", r.Status, r.Body)
	}
	id := e.lease("acme", map[string]any{"publicPorts": []int{8000, 8000}})
	if got := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)["publicPorts"]; fmt.Sprint(got) != "[8000]" {
		t.Errorf("the sandbox's publicPorts: %v", got)
	}
	e.sh("acme", id, "echo public > hello.txt")
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8001", "--bind", "127.0.0.1"}})
	e.waitListening("acme", id, 8000)
	e.waitListening("acme", id, 8001)
	for _, c := range []struct {
		url, host string
		want      int
	}{
		{e.http.URL + "/hello.txt", "8000-" + hostLabel(id) + ".localhost", 200},
		{e.http.URL + "/hello.txt", "8000-" + id + ".localhost", 200}, // the id's own spelling, as older links have it
		{e.http.URL + "/v1/sandbox/" + id + "/ports/8000/hello.txt", "", 307},
		{e.http.URL + "/hello.txt", "8001-" + hostLabel(id) + ".localhost", 401},
	} {
		if res, body := fetchPreview(t, "GET", c.url, http.Header{"Host": {c.host}}); res.StatusCode != c.want || (c.want == 200 && body != "public\n") {
			t.Errorf("%s (Host %q) with no credential: %d %q, want %d", c.url, c.host, res.StatusCode, body, c.want)
		}
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	if res, _ := fetchPreview(t, "GET", e.http.URL+"/hello.txt", http.Header{"Host": {"8000-" + hostLabel(id) + ".localhost"}}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a public port after the end: %d", res.StatusCode)
	}
}

// TestPreviewStalledReader: a host-form preview's client that takes none
// of the answer (a link or a public port is anyone's) loses its connection
// at the stall bound, as an API client does, and the org's command it held
// is free again: it cannot pin the org's commands. On both backends.
func TestPreviewStalledReader(t *testing.T) {
	cfg := server.Config{Service: service.Config{PublicPreviews: true}}
	cfg.API.Stall = 500 * time.Millisecond
	onBackends(t, cfg, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"publicPorts": []int{8000}})
		e.sh("acme", id, "head -c 268435456 /dev/zero > big")
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
		e.waitListening("acme", id, 8000)
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.http.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: 8000-%s.localhost\r\n\r\n", hostLabel(id))
		// Read nothing; the server gives up after the bound and closes:
		// what it wrote before is in the sockets' buffers (a few MiB), then
		// the end.
		time.Sleep(3 * time.Second)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, conn)
		if err != nil {
			t.Errorf("the server did not close a connection whose client read nothing for 3 s (%d bytes read): %v", n, err)
		}
		if n >= 256<<20 {
			t.Errorf("the whole answer (%d bytes) went to a client that read nothing for 3 s", n)
		}
		// The connection is gone, and with it the command it held.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var q struct {
				Quotas []struct {
					Name string
					Used float64
				}
			}
			json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/quota", "acme", nil).Body, &q)
			used := -1.0
			for _, l := range q.Quotas {
				if l.Name == "commands" {
					used = l.Used
				}
			}
			if used == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stalled preview still holds a command: %v in use", used)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
