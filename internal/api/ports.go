package api

import (
	"context"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Ports is what the port preview routes need: a connection to a port on a
// sandbox's own loopback, and the access that stands in for a key where a
// browser cannot send one (links, public ports).
type Ports interface {
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	Config() preview.Config
	Link(ctx context.Context, id string, port int, ttlSec int64) (*preview.PreviewLink, error)
	Access(ctx context.Context, token, id string, port int) (context.Context, time.Time, error)
	Public(ctx context.Context, id string, port int) (context.Context, error)
}

var _ Ports = (*preview.Previews)(nil)

func (s *Server) portRoutes(p string) {
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		s.raw(m+" "+p+"/{id}/ports/{port}/{path...}", http.HandlerFunc(s.pathPreview), doc{Summary: "A port preview, path form, for API clients with a key (Authorization: Bearer): the request, and its answer, relayed to an HTTP server listening on that port on the sandbox's own loopback " +
			"(over the sandbox's control channel: runsc's port forward on gVisor, the runner's relay over exec on a cluster; the sandbox's network stays shut). WebSocket upgrades pass through. The answer is on the API's origin, so it is sandboxed: Content-Security-Policy: sandbox, " +
			"and the app's Set-Cookie, Service-Worker-Allowed, Access-Control-* and Clear-Site-Data headers are dropped. A browser's navigation, a request with a preview link's token, " +
			"or one without a key is redirected (307, the token kept) to the host form {port}-sb-{…}.{preview-domain}, the preview's own origin, where links and public ports work. " +
			"The Authorization header never reaches the app. 502 when nothing listens",
			BodyRaw: "application/octet-stream", AnswerRaw: "application/octet-stream", Query: []string{preview.TokenParam + ": a preview link's token (redirected to the host form with it)"},
			Errors: []int{400, 401, 404, 409, 429, 501, 502}})
	}
	s.handle("POST "+p+"/{id}/ports/{port}/link", s.previewLink, doc{Summary: "Mint a preview link to a port: url, the host form with the token, opens the preview in a browser with no key (on the preview's own origin) until expiresAt " +
		"(ttlSec, default 1 h, never past the lease nor the minting token's expiry), until the sandbox ends or until the API key that minted it is revoked or expires. pathUrl is the path form, without the token, for API clients with a key. " +
		"Treat url as a secret: whoever has it opens that port",
		Body: typ[linkRequest](), Answer: typ[preview.PreviewLink](), Status: http.StatusCreated, Errors: []int{404, 409, 501}})
}

// linkRequest is the body of POST …/ports/{port}/link.
type linkRequest struct {
	TTLSec int64 `json:"ttlSec,omitempty" jsonschema:"how long the link works, in seconds (default 3600; never past the lease's expiry)"`
}

func (s *Server) previewLink(w http.ResponseWriter, r *http.Request) error {
	port, ok := preview.ParsePort(r.PathValue("port"))
	if !ok {
		return badPort(r.PathValue("port"))
	}
	var req linkRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	link, err := s.Ports.Link(r.Context(), r.PathValue("id"), port, req.TTLSec)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, link)
	return nil
}

func badPort(s string) error {
	return sandbox.Errorf(sandbox.KindInvalid, "port %q: a port is 1-65535", s)
}

// Handler is the server's whole HTTP face: a request whose Host is a
// preview host ({port}-sb-{…}.{preview-domain}) is that preview, whatever its
// path, before any API route is looked at; every other request is the
// API's. Every request carries its origin, from which links are made.
func (s *Server) Handler() http.Handler {
	var domain string
	if s.Ports != nil {
		domain = s.Ports.Config().DomainOrDefault()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := preview.Origin{Scheme: "http", Host: r.Host}
		if r.TLS != nil {
			o.Scheme = "https"
		}
		r = r.WithContext(preview.WithOrigin(r.Context(), o))
		if domain != "" {
			if port, id, ok := preview.ParseHost(r.Host, domain); ok {
				// Bounded like the API's own answers and bodies: a client
				// that takes none of an answer, or trickles a body, holds
				// a connection and one of the org's commands no longer
				// than --stall-timeout (a link or a public port is anyone's).
				sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, rc: http.NewResponseController(w), stall: s.opts.Stall}
				s.bodyStall(sw, r)
				s.hostPreview(sw, r, id, port)
				return
			}
		}
		s.ServeHTTP(w, r)
	})
}

// hostPreview is the host form: the whole of {port}-sb-{…}.{preview-domain},
// an origin of its own, is the app. Access is a key, a link (its first
// visit sets a host-only cookie), that cookie, or nobody on a public port.
func (s *Server) hostPreview(w http.ResponseWriter, r *http.Request, id string, port int) {
	ctx, release, done := s.previewAccess(w, r, id, port)
	if done {
		return
	}
	defer release()
	if err := s.relay(w, r.WithContext(ctx), id, port, "", hostOnlyCookies); err != nil {
		s.previewError(w, r, err)
	}
}

// pathPreview is the path form: /v1/sandbox/{id}/ports/{port}/{path...}
// on the API's own origin — where the terminal and screen pages run and
// where every path-form preview of every org would share one origin. So
// no browser is served here: a navigation, a link's token or a request
// without a key is sent to the host form (the token along, if it came
// with one); what is served, to an API client with a key, is answered
// sandboxed (apiSafe), so that nothing the app says can run as, store
// under or reach into the API's origin.
func (s *Server) pathPreview(w http.ResponseWriter, r *http.Request) {
	portText, id := r.PathValue("port"), r.PathValue("id")
	port, ok := preview.ParsePort(portText)
	if !ok {
		s.previewError(w, r, badPort(portText))
		return
	}
	if !sandbox.ValidID(id) {
		s.previewError(w, r, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found"))
		return
	}
	mark := "/" + id + "/ports/" + portText + "/"
	escaped := r.URL.EscapedPath()
	i := strings.Index(escaped, mark)
	if i < 0 {
		s.previewError(w, r, sandbox.Errorf(sandbox.KindInvalid, "the preview path is malformed"))
		return
	}
	if r.URL.Query().Has(preview.TokenParam) || r.Header.Get("Authorization") == "" || isNavigation(r) {
		s.toHostForm(w, r, id, port, escaped[i+len(mark)-1:])
		return
	}
	ctx, release, done := s.keyAccess(w, r)
	if done {
		return
	}
	defer release()
	if err := s.relay(w, r.WithContext(ctx), id, port, "/"+r.PathValue("path"), apiSafe); err != nil {
		s.previewError(w, r, err)
	}
}

// isNavigation is a browser loading a document (a page, a frame, an
// object): what would run the app's page on the API's origin. Fetch
// metadata says so in every current browser; an older one is caught by
// the request carrying no key (a browser cannot send one).
func isNavigation(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Mode") == "navigate" {
		return true
	}
	switch r.Header.Get("Sec-Fetch-Dest") {
	case "document", "iframe", "frame", "embed", "object", "fencedframe":
		return true
	}
	return false
}

// toHostForm redirects a path-form request to the same preview's host
// form: path (escaped, from "/") and the query as they came, a link's
// token included, so a link minted before links were host-form only still
// opens. 307 keeps the method and body. Nothing of the request's
// credentials is put in the URL.
func (s *Server) toHostForm(w http.ResponseWriter, r *http.Request, id string, port int, path string) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	_, serverPort, _ := net.SplitHostPort(r.Host)
	to := scheme + "://" + preview.Host(port, id, s.Ports.Config().DomainOrDefault(), serverPort) + path
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, to, http.StatusTemporaryRedirect)
}

// previewAccess finds who a host-form request is: a key, a link's token
// in the URL (the first visit: a host-only cookie is set and the browser
// sent to the URL without the token), the cookie of an earlier visit, or
// nobody on a public port. done means it has answered.
func (s *Server) previewAccess(w http.ResponseWriter, r *http.Request, id string, port int) (_ context.Context, release func(), done bool) {
	if tok := r.URL.Query().Get(preview.TokenParam); tok != "" {
		ctx, exp, err := s.Ports.Access(r.Context(), tok, id, port)
		if err != nil {
			s.previewError(w, r, err)
			return nil, nil, true
		}
		http.SetCookie(w, &http.Cookie{Name: preview.CookieName, Value: tok, Path: "/", Expires: exp, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			// The token leaves the address bar (and the history, and
			// every Referer the app's page would send).
			q := r.URL.Query()
			q.Del(preview.TokenParam)
			to := r.URL.EscapedPath()
			if len(q) > 0 {
				to += "?" + q.Encode()
			}
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Referrer-Policy", "no-referrer")
			http.Redirect(w, r, to, http.StatusSeeOther)
			return nil, nil, true
		}
		return ctx, func() {}, false
	}
	if r.Header.Get("Authorization") != "" {
		return s.keyAccess(w, r)
	}
	var lastErr error
	for _, c := range r.CookiesNamed(preview.CookieName) {
		ctx, _, err := s.Ports.Access(r.Context(), c.Value, id, port)
		if err == nil {
			return ctx, func() {}, false
		}
		lastErr = err
	}
	// No credential (or only a stale cookie): a public port, or the
	// refusal that says how to get in.
	ctx, err := s.Ports.Public(r.Context(), id, port)
	if err == nil {
		return ctx, func() {}, false
	}
	if lastErr == nil || sandbox.KindOf(err) != sandbox.KindUnauthorized {
		lastErr = err
	}
	s.previewError(w, r, lastErr)
	return nil, nil, true
}

// keyAccess admits a request by its Authorization header (a key or a
// token, never a sandbox's own credential), within the key's bound of
// requests at once. done means it has answered.
func (s *Server) keyAccess(w http.ResponseWriter, r *http.Request) (_ context.Context, release func(), done bool) {
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		s.previewError(w, r, sandbox.Errorf(sandbox.KindUnauthorized, "malformed Authorization: send Authorization: Bearer <key>"))
		return nil, nil, true
	}
	p, err := s.Auth.Principal(r.Context(), token)
	if err == nil {
		err = confine(p, "", r)
	}
	if err != nil {
		s.previewError(w, r, err)
		return nil, nil, true
	}
	release, err = s.perKey.admit(token)
	if err != nil {
		s.previewError(w, r, err)
		return nil, nil, true
	}
	return sandbox.WithPrincipal(r.Context(), p), release, false
}

// hostOnlyCookies is the host form's answer rewrite: every cookie the app
// sets is kept for its own preview host alone (no Domain attribute), so
// it cannot reach another preview under the preview domain — another
// tenant's — nor, with a preview domain under the API's, the API.
func hostOnlyCookies(h http.Header) {
	for i, line := range h["Set-Cookie"] {
		h["Set-Cookie"][i] = preview.HostOnlyCookie(line)
	}
}

// apiSafe is the path form's answer rewrite, on the API's origin: the
// answer is sandboxed (CSP sandbox without allow-same-origin: a document
// of it runs as an opaque origin, with no script), and loses every header
// by which the app would act on the origin rather than be read: cookies,
// service-worker scope, CORS grants, and the wiping of site data.
func apiSafe(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			delete(h, k)
		}
	}
	for _, k := range []string{"Set-Cookie", "Set-Cookie2", "Service-Worker-Allowed", "Clear-Site-Data",
		"Content-Security-Policy", "Content-Security-Policy-Report-Only", "Refresh"} {
		h.Del(k)
	}
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// relay relays one request (one connection: the relay is per request) to
// the port inside, as a request for path ("": the request's own path),
// the answer's headers passed through rewrite (the form's safety) before
// any reach the client. A refusal before the relay runs — another org's
// id, nothing listening — is an error for the caller to answer.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, id string, port int, path string, rewrite func(http.Header)) error {
	if r.Header.Get("Upgrade") != "" {
		// An upgraded connection (a live-reload socket) outlives the
		// check that admitted it: it ends when the key it came by — or
		// the key that minted its link — is revoked or expires.
		ctx, stop := keywatch.Watch(r.Context(), s.Keys)
		defer stop()
		r = r.WithContext(ctx)
	}
	conn, err := s.Ports.DialPort(r.Context(), id, port)
	if err != nil {
		return err
	}
	defer conn.Close()
	handed := false
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if handed {
				return nil, errors.New("the preview's one connection is used")
			}
			handed = true
			return conn, nil
		},
	}
	defer tr.CloseIdleConnections()
	host := "127.0.0.1:" + strconv.Itoa(port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", host
			if path != "" {
				pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			}
			pr.Out.Host = host
			stripCredentials(pr.Out)
			pr.SetXForwarded()
		},
		Transport: tr,
		ModifyResponse: func(res *http.Response) error {
			rewrite(res.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.previewError(w, r, sandbox.Wrap(sandbox.KindBadGateway, err, "the server on port "+strconv.Itoa(port)+" did not answer: "+err.Error()))
		},
	}
	rp.ServeHTTP(&informational{ResponseWriter: w, rewrite: rewrite}, r)
	return nil
}

// informational passes the app's informational answers (103 Early Hints
// and the like, which the proxy relays as they come, past ModifyResponse)
// through the same rewrite as the final one.
type informational struct {
	http.ResponseWriter
	rewrite func(http.Header)
}

func (w *informational) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.rewrite(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *informational) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stripCredentials removes from a request bound for the app what admitted
// it to the preview: the caller's key, the preview cookie (the app's own
// cookies pass), and a link's token in the query. None of them is the
// app's to see.
func stripCredentials(r *http.Request) {
	r.Header.Del("Authorization")
	// The Cookie header is filtered as text, so the app's own cookies
	// reach it byte for byte.
	var kept []string
	for _, line := range r.Header.Values("Cookie") {
		for _, pair := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(pair, "=")
			if strings.TrimSpace(name) != preview.CookieName && strings.TrimSpace(pair) != "" {
				kept = append(kept, strings.TrimSpace(pair))
			}
		}
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
	if q := r.URL.Query(); q.Has(preview.TokenParam) {
		q.Del(preview.TokenParam)
		r.URL.RawQuery = q.Encode()
	}
}

// previewError answers a preview's refusal with the status its kind maps
// to: an HTML page for a browser (a preview is usually opened in one), the
// JSON error object for anything else.
func (s *Server) previewError(w http.ResponseWriter, r *http.Request, err error) {
	if !wantsHTML(r) {
		s.writeError(w, r, err)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	code := status(sandbox.KindOf(err))
	if code >= 500 {
		s.log.Error("preview failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	errorPage.Execute(w, struct {
		Code          int
		Status, Error string
	}{code, http.StatusText(code), sandbox.Message(err)})
}

// wantsHTML is a browser's navigation: its Accept names text/html.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

var errorPage = template.Must(template.New("preview-error").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Code}} {{.Status}} · sandbox preview</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}h1{font-size:1.4em}code{background:#eee;padding:0 .2em}</style></head>
<body><h1>{{.Code}} {{.Status}}</h1><p id="error">{{.Error}}</p>
<p>This is the sandbox server answering for the app it previews.{{if eq .Code 502}} Start the app (listening on the sandbox's 127.0.0.1 or 0.0.0.0) and reload.{{end}}</p></body></html>
`))
