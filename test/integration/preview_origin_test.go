package integration_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// hostileApp is an app on port 8000 that does what a hostile tenant's app
// would on whatever origin it is served: argv is the API's origin, this
// sandbox's id, another org's sandbox id, a label for its cookies and a
// parent domain to set them for (and its parent, if it has one). / is a page whose script plants cookies,
// registers a service worker over the API's origin (and, as a control,
// one on its own), and reads the other org's preview through the path
// form; /sw.js is a worker allowed scope /; /secret is what its org
// keeps (readable by any origin, as an app may well say); /headers echoes
// the request's headers; /hostile answers every header the API's origin
// must never pass on.
const hostileApp = `import http.server, sys
API, ID, FOREIGN, LABEL, PARENT = sys.argv[1:6]
PAGE = """<!doctype html><title>app</title><script>
window.done = false;
(async () => {
  const r = {origin: location.origin};
  document.cookie = "jsplanted=LABEL; path=/";
  try { await navigator.serviceWorker.register("API/v1/sandbox/ID/ports/8000/sw.js", {scope: "/"}); r.apiSW = "registered"; } catch (e) { r.apiSW = "refused: " + e; }
  try { r.ownSW = (await navigator.serviceWorker.register("sw.js", {scope: "./"})).scope; } catch (e) { r.ownSW = "refused: " + e; }
  try { r.foreign = await (await fetch("API/v1/sandbox/FOREIGN/ports/8000/secret", {credentials: "include"})).text(); } catch (e) { r.foreign = "refused: " + e; }
  window.result = r; window.done = true;
})();
</script>""".replace("API", API).replace("FOREIGN", FOREIGN).replace("ID", ID).replace("LABEL", LABEL).encode()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def answer(self, ctype, body, extra=()):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        p = self.path.split("?")[0]
        if p.endswith("/sw.js"):
            self.answer("text/javascript", b"self.addEventListener('fetch', () => {});", [("Service-Worker-Allowed", "/")])
        elif p.endswith("/secret"):
            self.answer("text/plain", ("secret of " + LABEL).encode(), [("Access-Control-Allow-Origin", "*")])
        elif p.endswith("/headers"):
            self.answer("text/plain", "".join(k + ": " + v + "\n" for k, v in self.headers.items()).encode())
        elif p.endswith("/hostile"):
            self.answer("text/html", b"<script>hostile()</script>", [("Service-Worker-Allowed", "/"), ("Set-Cookie", "planted=1; Path=/"),
                ("Set-Cookie", "parent=1; Domain=" + PARENT + "; Path=/"), ("Access-Control-Allow-Origin", "*"),
                ("Access-Control-Allow-Credentials", "true"), ("Access-Control-Expose-Headers", "*"), ("Clear-Site-Data", '"*"'),
                ("Content-Security-Policy", "sandbox allow-scripts allow-same-origin")])
        else:
            cookies = [("Set-Cookie", "planted=" + LABEL + "; Path=/"), ("Set-Cookie", "parent=" + LABEL + "; Domain=" + PARENT + "; Path=/")]
            if "." in PARENT:
                cookies.append(("Set-Cookie", "apex=" + LABEL + "; domain=" + PARENT.split(".", 1)[1] + "; path=/"))
            self.answer("text/html", PAGE, [("Service-Worker-Allowed", "/")] + cookies)
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

// startHostile starts hostileApp in id and waits until it answers.
func (e *env) startHostile(org, id, foreign, parent string) {
	e.t.Helper()
	e.startProcess(org, id, map[string]any{"argv": []string{"python3", "-c", hostileApp, e.http.URL, id, foreign, org, parent}})
	e.waitListening(org, id, 8000)
}

// linkToken is the token in a link's host-form URL.
func linkToken(t *testing.T, link map[string]any) string {
	t.Helper()
	u, err := url.Parse(link["url"].(string))
	if err != nil || !strings.HasPrefix(u.Query().Get("preview_token"), "spv2.") {
		t.Fatalf("link %v: %v", link, err)
	}
	return u.Query().Get("preview_token")
}

// TestPreviewOffAPIOriginInBrowser: in one real Chromium, a victim
// opens globex's preview, then acme's hostile app through the path form
// with its link's token (what links handed out before). The app's page
// must not run on the API's origin: it cannot register a service worker
// over the API's origin (a worker on its own origin, the control, can),
// cannot read globex's preview, and no cookie it sets — by header or by
// script — is one the browser sends the API.
func TestPreviewOffAPIOriginInBrowser(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		foreign := e.lease("globex", map[string]any{"ttlSec": 600})
		e.startHostile("globex", foreign, id, "localhost")
		e.startHostile("acme", id, foreign, "localhost")
		ctx, cancel := browser(t)
		defer cancel()

		pathWithToken := func(org, sb string) string {
			return e.http.URL + "/v1/sandbox/" + sb + "/ports/8000/?preview_token=" + linkToken(t, e.previewLink(org, sb, 8000, 300))
		}
		// The victim opens its own preview (and so holds its access).
		if err := chromedp.Do(ctx, chromedp.Navigate(pathWithToken("globex", foreign))); err != nil {
			t.Fatal(err)
		}
		if err := waitPage(ctx, `window.done === true`, 30*time.Second); err != nil {
			t.Fatalf("the victim's preview: %v", err)
		}
		// Then the attacker's.
		if err := chromedp.Do(ctx, chromedp.Navigate(pathWithToken("acme", id))); err != nil {
			t.Fatal(err)
		}
		if err := waitPage(ctx, `window.done === true`, 30*time.Second); err != nil {
			t.Fatalf("the app's page: %v", err)
		}
		r, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`window.result`))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the app's page: %v", r)
		if r["origin"] == e.http.URL {
			t.Errorf("the app's page runs on the API's origin %s", r["origin"])
		}
		if !strings.HasPrefix(r["ownSW"], "http") {
			t.Fatalf("control: the app cannot register a worker on its own origin (%q): the check below would prove nothing", r["ownSW"])
		}
		if !strings.HasPrefix(r["apiSW"], "refused") {
			t.Errorf("the app registered a service worker over the API's origin: %q", r["apiSW"])
		}
		if strings.Contains(r["foreign"], "secret of globex") {
			t.Errorf("the app read another org's preview: %q", r["foreign"])
		}

		// From the API's own origin: no worker there, no cookie of the app's
		// in what the browser would send it.
		if err := chromedp.Do(ctx, chromedp.Navigate(e.http.URL+"/healthz")); err != nil {
			t.Fatal(err)
		}
		scopes, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.serviceWorker.getRegistrations().then(rs => rs.map(r => r.scope).join(" "))`, chromedp.EvalAwaitPromise))
		if err != nil || scopes != "" {
			t.Errorf("service workers on the API's origin: %q %v", scopes, err)
		}
		cookies, err := cookiesFor(ctx, []string{e.http.URL + "/", e.http.URL + "/v1/sandbox/" + id + "/ports/8000/"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cookies {
			if c.Name != "sandbox_preview" {
				t.Errorf("the browser sends the API a cookie the app set: %s=%s (domain %s, path %s)", c.Name, c.Value, c.Domain, c.Path)
			}
		}
	})
}

// TestPreviewCookieDomainInBrowserOnRunsc: with a preview domain of its
// own (preview.sandbox.test, the API at api.sandbox.test, both resolved by
// Chromium to this machine), a cookie acme's app sets (by header) for the
// preview domain or its parent reaches neither globex's preview nor the
// API: the server keeps every app cookie host-only.
func TestPreviewCookieDomainInBrowserOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	const domain = "preview.sandbox.test"
	e := newEnvConfig(t, server.Config{Preview: preview.Config{Domain: domain}})
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	foreign := e.lease("globex", map[string]any{"ttlSec": 600})
	e.startHostile("globex", foreign, id, "example.invalid")
	e.startHostile("acme", id, foreign, domain)
	ctx, cancel := browser(t, chromedp.Flag("host-resolver-rules", "MAP *.sandbox.test 127.0.0.1"))
	defer cancel()
	api := "http://api.sandbox.test:" + e.serverPort()

	victim := e.previewLink("globex", foreign, 8000, 300)["url"].(string)
	attacker := e.previewLink("acme", id, 8000, 300)["url"].(string)
	for _, u := range []string{victim, attacker} {
		if !strings.Contains(u, "."+domain+":") {
			t.Fatalf("link %q is not under %s", u, domain)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
			t.Fatal(err)
		}
		if err := waitPage(ctx, `window.done === true`, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
	cookies, err := cookiesFor(ctx, []string{strings.Split(attacker, "?")[0]})
	if err != nil {
		t.Fatal(err)
	}
	var planted, parent bool
	for _, c := range cookies {
		planted, parent = planted || c.Name == "planted", parent || c.Name == "parent"
		if (c.Name == "parent" || c.Name == "apex") && strings.TrimPrefix(c.Domain, ".") != strings.Split(strings.TrimPrefix(attacker, "http://"), ":")[0] {
			t.Errorf("the app's cookie %s is for domain %q, not its own host", c.Name, c.Domain)
		}
	}
	if !planted || !parent {
		t.Fatalf("control: the app's host-only cookie was not kept (%v): the checks below would prove nothing", cookies)
	}

	// globex's app, and the API, see none of acme's cookies.
	if err := chromedp.Do(ctx, chromedp.Navigate(strings.Split(victim, "?")[0]+"headers")); err != nil {
		t.Fatal(err)
	}
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || strings.Contains(seen, "=acme") {
		t.Errorf("another tenant's preview got acme's cookies: %q %v", seen, err)
	}
	cookies, err = cookiesFor(ctx, []string{api + "/", strings.Split(victim, "?")[0]})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies {
		if c.Name != "sandbox_preview" && c.Value != "globex" {
			t.Errorf("the API or globex's preview is sent acme's cookie %s=%s (domain %s)", c.Name, c.Value, c.Domain)
		}
	}
}

// TestPreviewPathForm: over HTTP, what the path form still serves
// (an API client with a key) is sandboxed and stripped of every header by
// which an app acts on the API's origin; the host form keeps them (its
// own origin) but makes the app's cookies host-only; a browser's
// navigation, a request without a key, or a link's token on the path form
// is redirected to the host form, the token along and no credential added.
func TestPreviewPathForm(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		e.startHostile("acme", id, id, "localhost")
		key := http.Header{"Authorization": {"Bearer " + e.keys["acme"]}}
		host := "8000-" + hostLabel(id) + ".localhost:" + e.serverPort()

		res, body := fetchPreview(t, "GET", e.http.URL+"/v1/sandbox/"+id+"/ports/8000/hostile", key)
		if res.StatusCode != 200 || body != "<script>hostile()</script>" {
			t.Fatalf("the path form with a key: %d %q", res.StatusCode, body)
		}
		if csp := res.Header.Values("Content-Security-Policy"); len(csp) != 1 || csp[0] != "sandbox" {
			t.Errorf("the path form's Content-Security-Policy: %q", csp)
		}
		for k, v := range res.Header {
			if k == "Set-Cookie" || k == "Service-Worker-Allowed" || k == "Clear-Site-Data" || strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("the path form passed the app's %s: %q", k, v)
			}
		}

		// The host form: its own origin; cookies host-only.
		res, _ = fetchPreview(t, "GET", e.http.URL+"/hostile", http.Header{"Host": {host}, "Authorization": key["Authorization"]})
		if res.StatusCode != 200 || res.Header.Get("Service-Worker-Allowed") != "/" || res.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("the host form: %d %v", res.StatusCode, res.Header)
		}
		if got := res.Header.Values("Set-Cookie"); len(got) != 2 || got[0] != "planted=1; Path=/" || got[1] != "parent=1; Path=/" {
			t.Errorf("the host form's cookies: %q, want both host-only", got)
		}

		// Redirects to the host form.
		to := "http://" + host + "/x/y%2Fz?q=1"
		for _, c := range []struct {
			name, method string
			h            http.Header
			query, want  string
		}{
			{"a navigation with a key", "GET", http.Header{"Authorization": key["Authorization"], "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}, "q=1", to},
			{"a frame with a key", "GET", http.Header{"Authorization": key["Authorization"], "Sec-Fetch-Dest": {"iframe"}}, "q=1", to},
			{"a browser without fetch metadata", "GET", http.Header{"Accept": {"text/html,*/*"}}, "q=1", to},
			{"no key", "GET", nil, "q=1", to},
			{"no key, POST", "POST", nil, "q=1", to},
			{"a preview cookie", "GET", http.Header{"Cookie": {"sandbox_preview=spv2.x.y"}}, "q=1", to},
			{"a link's token, with a key", "GET", http.Header{"Authorization": key["Authorization"]}, "q=1&preview_token=spv2.x.y", to + "&preview_token=spv2.x.y"},
		} {
			res, body := fetchPreview(t, c.method, e.http.URL+"/v1/sandbox/"+id+"/ports/8000/x/y%2Fz?"+c.query, c.h)
			if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != c.want || len(res.Cookies()) != 0 || strings.Contains(body, "hostile") {
				t.Errorf("%s: %d %q %v, want a 307 to %q", c.name, res.StatusCode, res.Header.Get("Location"), res.Header["Set-Cookie"], c.want)
			}
			if strings.Contains(res.Header.Get("Location"), e.keys["acme"]) {
				t.Errorf("%s: the key is in the URL", c.name)
			}
		}
		if res, _ := fetchPreview(t, "GET", e.http.URL+"/v1/sandbox/sb_NOTANID/ports/8000/", nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("a malformed id: %d", res.StatusCode)
		}
	})
}

// TestPreviewLinkDiesWithKey: a link minted with a key works until
// that key is revoked — then its token and the cookie its first visit set
// are refused (401) — and one
// minted with a key that expires stops when the key does.
func TestPreviewLinkDiesWithKey(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		e.startHostile("acme", id, id, "localhost")
		host := "8000-" + hostLabel(id) + ".localhost:" + e.serverPort()
		secret, k, err := e.srv.Store.MintKey(t.Context(), "acme", "preview minter", store.ScopeTenant, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		e.keys["acme-minter"] = secret
		tok := linkToken(t, e.previewLink("acme-minter", id, 8000, 300))

		res, _ := fetchPreview(t, "GET", e.http.URL+"/headers?preview_token="+tok, http.Header{"Host": {host}})
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
			t.Fatalf("the link's first visit: %d %v", res.StatusCode, res.Header["Set-Cookie"])
		}
		cookie := http.Header{"Host": {host}, "Cookie": {"sandbox_preview=" + res.Cookies()[0].Value}}
		if res, body := fetchPreview(t, "GET", e.http.URL+"/secret", cookie); res.StatusCode != 200 || body != "secret of acme" {
			t.Fatalf("the link's cookie: %d %q", res.StatusCode, body)
		}

		e.must(http.StatusOK, "DELETE", "/v1/orgs/acme/keys/"+k.ID, "system", nil)
		for name, h := range map[string]http.Header{"the cookie": cookie, "the token": {"Host": {host}}} {
			u := e.http.URL + "/secret"
			if name == "the token" {
				u += "?preview_token=" + tok
			}
			res, body := fetchPreview(t, "GET", u, h)
			if res.StatusCode != http.StatusUnauthorized || strings.Contains(body, "secret of") || len(res.Cookies()) != 0 {
				t.Errorf("%s after its key's revocation: %d %q", name, res.StatusCode, body)
			}
		}
		// The key that is still live mints links that still work.
		other := linkToken(t, e.previewLink("acme", id, 8000, 300))
		if res, _ := fetchPreview(t, "GET", e.http.URL+"/secret", http.Header{"Host": {host}, "Cookie": {"sandbox_preview=" + other}}); res.StatusCode != 200 {
			t.Errorf("a link of a live key: %d", res.StatusCode)
		}

		// A key that expires takes its links with it.
		secret, _, err = e.srv.Store.MintKey(t.Context(), "acme", "short", store.ScopeTenant, time.Now().Add(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		e.keys["acme-short"] = secret
		short := http.Header{"Host": {host}, "Cookie": {"sandbox_preview=" + linkToken(t, e.previewLink("acme-short", id, 8000, 300))}}
		if res, _ := fetchPreview(t, "GET", e.http.URL+"/secret", short); res.StatusCode != 200 {
			t.Fatalf("a link of a key not yet expired: %d", res.StatusCode)
		}
		time.Sleep(3500 * time.Millisecond)
		if res, body := fetchPreview(t, "GET", e.http.URL+"/secret", short); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("a link after its key expired: %d %q", res.StatusCode, body)
		}
	})
}

// cookiesFor is every cookie the browser would send to urls.
func cookiesFor(ctx context.Context, urls []string) ([]*network.Cookie, error) {
	r, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: urls})
	return r.Cookies, err
}

// TestPreviewLinkOfTokenOnRunsc: a principal that is not a key binds its
// links to what expires it. A link minted with an OIDC token expires with
// the token (whatever ttlSec asked), and works until then; a sandbox's
// own credential (which ends with its lease) mints none.
func TestPreviewLinkOfTokenOnRunsc(t *testing.T) {
	p := testenv.NewOIDCProvider(t)
	e := newEnvConfig(t, server.Config{Identity: identity.Config{Issuers: []string{p.Issuer()}}})
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	now := time.Now()
	kid, key := p.SigningKey()
	exp := now.Add(2 * time.Minute).Unix()
	tok := sign(t, jose.RS256, key, kid, map[string]any{"iss": p.Issuer(), "sub": "caller", "aud": "sandbox", "org": "acme",
		"iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": exp})
	link := e.previewLink(tok, id, 8000, 3600)
	if got := int64(link["expiresAt"].(float64)); got > exp || got < exp-5 {
		t.Errorf("a link minted with a token expiring at %d expires at %d", exp, got)
	}
	host := "8000-" + hostLabel(id) + ".localhost:" + e.serverPort()
	res, _ := fetchPreview(t, "GET", e.http.URL+"/?preview_token="+linkToken(t, link), http.Header{"Host": {host}})
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || res.Cookies()[0].Expires.Unix() != int64(link["expiresAt"].(float64)) {
		t.Errorf("the token's link, first visit: %d %v", res.StatusCode, res.Header["Set-Cookie"])
	}

	cred := e.credentialIn("acme", id)
	if r := e.do("POST", "/v1/sandbox/"+id+"/ports/8000/link", cred, map[string]any{}); r.Status != http.StatusForbidden {
		t.Errorf("a sandbox's credential mints a link: %d %s", r.Status, r.Body)
	}
}

// TestPreviewSocketDiesWithKeyOnRunsc: a live-reload socket opened on a
// link's cookie is closed once the key that minted the link is revoked —
// not only the requests after it.
func TestPreviewSocketDiesWithKeyOnRunsc(t *testing.T) {
	defer func(d time.Duration) { keywatch.Every = d }(keywatch.Every)
	keywatch.Every = 200 * time.Millisecond
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", wsEcho}})
	secret, k, err := e.srv.Store.MintKey(t.Context(), "acme", "preview minter", store.ScopeTenant, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	e.keys["acme-minter"] = secret
	tok := linkToken(t, e.previewLink("acme-minter", id, 8003, 300))
	addr := e.http.Listener.Addr().String()
	opts := &websocket.DialOptions{
		HTTPHeader: http.Header{"Cookie": {"sandbox_preview=" + tok}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}}},
	}
	var c *websocket.Conn
	for range 50 {
		if c, _, err = websocket.Dial(t.Context(), "ws://8003-"+id+".localhost:"+e.serverPort()+"/live", opts); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the preview's socket on the link's cookie: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(t.Context(), websocket.MessageText, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(t.Context()); err != nil || string(got) != "one" {
		t.Fatalf("echo: %q %v", got, err)
	}

	e.must(http.StatusOK, "DELETE", "/v1/orgs/acme/keys/"+k.ID, "system", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c.Write(ctx, websocket.MessageText, []byte("two")) // may already fail: the socket is closing
	for {
		_, got, err := c.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal("the socket is still open 10 s after its link's key was revoked")
			}
			break
		}
		if string(got) != "two" {
			t.Fatalf("echo: %q", got)
		}
	}
}
