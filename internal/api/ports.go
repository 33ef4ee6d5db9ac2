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

	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// Ports is what the port preview routes need: a connection to a port on a
// sandbox's own loopback, and the access that stands in for a key where a
// browser cannot send one (links, public ports).
type Ports interface {
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	Config() preview.Config
	Link(ctx context.Context, id string, port int, ttlSec int64) (*service.PreviewLink, error)
	Access(ctx context.Context, token, id string, port int) (context.Context, time.Time, error)
	Public(ctx context.Context, id string, port int) (context.Context, error)
}

var _ Ports = (*service.Previews)(nil)

func (s *Server) portRoutes(p string) {
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		s.raw(m+" "+p+"/{id}/ports/{port}/{path...}", http.HandlerFunc(s.pathPreview), doc{Summary: "A port preview: the request, and its answer, relayed to an HTTP server listening on that port on the sandbox's own loopback " +
			"(over the exec channel; the sandbox's network stays shut). WebSocket upgrades pass through. Access: your key (Authorization: Bearer), or a preview link (POST …/ports/{port}/link; " +
			"its first visit sets a cookie for this path and redirects to the URL without the token). Neither the Authorization header nor the preview cookie reaches the app. " +
			"The same preview is served at / of the host {port}-{id}.{preview-domain}. 502 when nothing listens (an HTML page for a browser)",
			BodyRaw: "application/octet-stream", AnswerRaw: "application/octet-stream", Query: []string{service.TokenParam + ": a preview link's token (the first visit only)"},
			Errors: []int{400, 401, 404, 409, 429, 501, 502}})
	}
	s.handle("POST "+p+"/{id}/ports/{port}/link", s.previewLink, doc{Summary: "Mint a preview link to a port: URLs of both forms (host and path) that open the preview in a browser with no key, until expiresAt " +
		"(ttlSec, default 1 h, never past the lease) or until the sandbox ends. Treat it as a secret: whoever has it opens that port",
		Body: typ[linkRequest](), Answer: typ[service.PreviewLink](), Status: http.StatusCreated, Errors: []int{404, 409, 501}})
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
// preview host ({port}-{id}.{preview-domain}) is that preview, whatever its
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
				s.servePreview(w, r, id, port, "/", "")
				return
			}
		}
		s.ServeHTTP(w, r)
	})
}

// pathPreview is the path form: /v1/sandbox/{id}/ports/{port}/{path...}.
func (s *Server) pathPreview(w http.ResponseWriter, r *http.Request) {
	portText, id := r.PathValue("port"), r.PathValue("id")
	port, ok := preview.ParsePort(portText)
	if !ok {
		s.previewError(w, r, badPort(portText))
		return
	}
	// The cookie's scope is this preview's prefix, as the caller spelled
	// it (/v1/sandbox or the /v1/sandboxes alias).
	mark := "/" + id + "/ports/" + portText + "/"
	i := strings.Index(r.URL.Path, mark)
	if i < 0 {
		s.previewError(w, r, sandbox.Errorf(sandbox.KindInvalid, "the preview path is malformed"))
		return
	}
	s.servePreview(w, r, id, port, r.URL.Path[:i+len(mark)], "/"+r.PathValue("path"))
}

// servePreview admits the request (key, link, or cookie) and relays it to
// port inside sandbox id as a request for path ("": the request's own).
// scope is the cookie's
// Path: "/" for the host form, the preview's prefix for the path form.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, id string, port int, scope, path string) {
	ctx, release, done := s.previewAccess(w, r, id, port, scope)
	if done {
		return
	}
	defer release()
	if err := s.relay(w, r.WithContext(ctx), id, port, path); err != nil {
		s.previewError(w, r, err)
	}
}

// previewAccess finds who the request is: a key, a link's token in the
// URL (the first visit: a cookie is set and the browser sent to the URL
// without it), the cookie of an earlier visit, or nobody on a public
// port. done means it has answered.
func (s *Server) previewAccess(w http.ResponseWriter, r *http.Request, id string, port int, scope string) (_ context.Context, release func(), done bool) {
	if tok := r.URL.Query().Get(service.TokenParam); tok != "" {
		ctx, exp, err := s.Ports.Access(r.Context(), tok, id, port)
		if err != nil {
			s.previewError(w, r, err)
			return nil, nil, true
		}
		http.SetCookie(w, &http.Cookie{Name: service.CookieName, Value: tok, Path: scope, Expires: exp, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			// The token leaves the address bar (and the history, and
			// every Referer the app's page would send).
			q := r.URL.Query()
			q.Del(service.TokenParam)
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
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := bearer(h)
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
		release, ok := s.perKey.take(token)
		if !ok {
			e := sandbox.Errorf(sandbox.KindLimit, "more than %d requests of this key are open at once; wait for some to finish", maxPerKey)
			e.RetryAfter = 1
			s.previewError(w, r, e)
			return nil, nil, true
		}
		return sandbox.WithPrincipal(r.Context(), p), release, false
	}
	var lastErr error
	for _, c := range r.CookiesNamed(service.CookieName) {
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

// relay relays one request (one connection: the relay is per request) to
// the port inside, as a request for path ("": the request's own path). A refusal before the relay runs — another org's id,
// nothing listening — is an error for the caller to answer.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, id string, port int, path string) error {
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
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.previewError(w, r, sandbox.Wrap(sandbox.KindBadGateway, err, "the server on port "+strconv.Itoa(port)+" did not answer: "+err.Error()))
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}

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
			if strings.TrimSpace(name) != service.CookieName && strings.TrimSpace(pair) != "" {
				kept = append(kept, strings.TrimSpace(pair))
			}
		}
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
	if q := r.URL.Query(); q.Has(service.TokenParam) {
		q.Del(service.TokenParam)
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
