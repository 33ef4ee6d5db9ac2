package identity

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Paths of the issuer's endpoints, under its URL.
const (
	PathDiscovery = "/.well-known/openid-configuration"
	PathMetadata  = "/.well-known/oauth-authorization-server"
	PathJWKS      = "/oauth/jwks"
	PathToken     = "/oauth/token"
)

// Metadata is the discovery document (OpenID Connect Discovery 1.0 and
// RFC 8414): this issuer grants token exchange only, so it has no
// authorization endpoint.
type Metadata struct {
	Issuer             string   `json:"issuer"`
	JWKSURI            string   `json:"jwks_uri"`
	TokenEndpoint      string   `json:"token_endpoint"`
	GrantTypes         []string `json:"grant_types_supported"`
	TokenAuthMethods   []string `json:"token_endpoint_auth_methods_supported"`
	ResponseTypes      []string `json:"response_types_supported"`
	SubjectTypes       []string `json:"subject_types_supported"`
	IDTokenSigningAlgs []string `json:"id_token_signing_alg_values_supported"`
	ScopesSupported    []string `json:"scopes_supported"`
	ClaimsSupported    []string `json:"claims_supported"`
}

// Metadata is the discovery document of the issuer.
func (is *Issuer) Metadata() Metadata {
	return Metadata{
		Issuer: is.cfg.URL, JWKSURI: is.cfg.URL + PathJWKS, TokenEndpoint: is.cfg.URL + PathToken,
		GrantTypes:       []string{GrantTokenExchange},
		TokenAuthMethods: []string{"client_secret_basic", "client_secret_post", "none"},
		ResponseTypes:    []string{"token"}, SubjectTypes: []string{"public"},
		IDTokenSigningAlgs: []string{"RS256"}, ScopesSupported: AllScopes,
		ClaimsSupported: []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", is.cfg.OrgClaim, claimSandbox, "scope", "act", "client_id"},
	}
}

// ServeDiscovery answers the discovery document.
func (is *Issuer) ServeDiscovery(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, 200, is.Metadata())
}

// ServeJWKS answers the public keys. A new key signs at once, so a
// verifier refetches on a kid it does not hold, as OIDC asks; a minute of
// caching costs nothing then.
func (is *Issuer) ServeJWKS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=60")
	writeJSON(w, 200, is.ring.public())
}

// ServeToken is the RFC 8693 token endpoint: a form POST, the client
// authenticated by HTTP Basic or client_secret in the form, or by nothing
// (then only a lease credential may be exchanged, and only narrowed).
func (is *Issuer) ServeToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	// The endpoint is anyone's and each exchange is an RSA signature: a
	// few at once, and a few per sandbox (limit.go).
	if !is.limit.acquire(r.Context()) {
		w.Header().Set("Retry-After", "1")
		writeOAuth(w, oauthErr(http.StatusTooManyRequests, "temporarily_unavailable", "too many token exchanges at once; retry"))
		return
	}
	defer is.limit.release()
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		writeOAuth(w, oauthErr(400, "invalid_request", "the body must be an application/x-www-form-urlencoded form under 64 KiB"))
		return
	}
	f := r.PostForm
	for k, v := range f {
		// RFC 6749 §3.2: parameters sent without a value are treated as
		// omitted, and none may be repeated.
		if len(v) > 1 {
			writeOAuth(w, oauthErr(400, "invalid_request", "parameter %q is repeated", k))
			return
		}
	}
	req := ExchangeRequest{
		GrantType: f.Get("grant_type"), ClientID: f.Get("client_id"), ClientSecret: f.Get("client_secret"),
		SubjectToken: f.Get("subject_token"), SubjectTokenType: f.Get("subject_token_type"),
		ActorToken: f.Get("actor_token"), RequestedTokenType: f.Get("requested_token_type"),
		Resource: f.Get("resource"), Audience: f.Get("audience"), Scope: f.Get("scope"),
	}
	if id, secret, ok := basicAuth(r); ok {
		if req.ClientID != "" && req.ClientID != id || req.ClientSecret != "" {
			writeOAuth(w, oauthErr(400, "invalid_request", "authenticate the client one way: HTTP Basic or the form"))
			return
		}
		req.ClientID, req.ClientSecret = id, secret
	}
	if s := f.Get("sandbox_expires_at"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			writeOAuth(w, oauthErr(400, "invalid_request", "sandbox_expires_at is Unix seconds"))
			return
		}
		req.ExpiresAt = time.Unix(n, 0)
	}
	tok, err := is.exchange(r.Context(), req, false, is.limit)
	if err != nil {
		var oe *OAuthError
		if !errors.As(err, &oe) {
			oe = oauthErr(500, "server_error", "the exchange failed")
		}
		if oe.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		if oe.status >= 500 {
			is.log.Error("token exchange", "err", err)
		}
		writeOAuth(w, oe)
		return
	}
	writeJSON(w, 200, tok)
}

// basicAuth is the client's id and secret from HTTP Basic, each
// form-urlencoded inside it (RFC 6749 §2.3.1).
func basicAuth(r *http.Request) (string, string, bool) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		return "", "", false
	}
	id, err1 := url.QueryUnescape(id)
	secret, err2 := url.QueryUnescape(secret)
	return id, secret, ok && err1 == nil && err2 == nil
}

func writeOAuth(w http.ResponseWriter, e *OAuthError) {
	if e.status == 401 {
		w.Header().Set("WWW-Authenticate", `Basic realm="sandbox"`)
	}
	writeJSON(w, e.status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
