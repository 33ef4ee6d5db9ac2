package integration_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// OIDC callers against a real provider (zitadel/oidc's OP, see
// testenv.NewOIDCProvider): the tokens it issues are the ones a deployer's
// callers hold; the tokens it would never issue (out of their times,
// forged, unsigned) are signed here with go-jose, with the provider's real
// key where the attack needs it, so that each is refused for the one
// thing wrong with it.

func TestOIDCCallers(t *testing.T) {
	t.Parallel() // see parallel_test.go
	p := testenv.NewOIDCProvider(t)
	onBackends(t, server.Config{Identity: identity.Config{Issuers: []string{p.Issuer()}}}, func(t *testing.T, e *env) { oidcCallers(t, e, p) })
}

func oidcCallers(t *testing.T, e *env, p *testenv.OIDCProvider) {
	t.Run("valid", func(t *testing.T) {
		tok := p.Token(t, "acme", "sandbox")
		e.must(http.StatusOK, "GET", "/v1/sandbox", tok, nil)
		id := e.lease(tok, nil)
		// The token's org is the org: its API key sees the sandbox, and
		// lists it, another org's does not.
		e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil)
		if list := e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil); !strings.Contains(string(list.Body), id) {
			t.Fatalf("acme's list lacks %s: %s", id, list.Body)
		}
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id, "globex", nil)
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id, p.Token(t, "globex", "sandbox"), nil)
		e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, p.Token(t, "acme", "sandbox"), nil)
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, tok, nil)
		// API keys keep working beside it.
		e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil)
	})

	t.Run("refused", func(t *testing.T) {
		now := time.Now()
		kid, key := p.SigningKey()
		stranger := testenv.NewOIDCProvider(t) // a real issuer this server does not trust
		_, strangerKey := stranger.SigningKey()
		fresh, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		pkix := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&key.PublicKey)})

		// good are the claims of a valid token; each case changes one.
		good := func() map[string]any {
			return map[string]any{"iss": p.Issuer(), "sub": "caller", "aud": "sandbox", "org": "acme",
				"iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
		}
		with := func(k string, v any) map[string]any {
			c := good()
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
			return c
		}
		expired := good()
		expired["iat"], expired["nbf"], expired["exp"] = now.Add(-70*time.Minute).Unix(), now.Add(-70*time.Minute).Unix(), now.Add(-10*time.Minute).Unix()
		early := good()
		early["iat"], early["nbf"] = now.Unix(), now.Add(10*time.Minute).Unix()

		// The control: the same forgery, nothing wrong with it, is taken —
		// so each refusal below is for what its case changed.
		e.must(http.StatusOK, "GET", "/v1/sandbox", sign(t, jose.RS256, key, kid, good()), nil)

		for _, c := range []struct{ name, token string }{
			{"expired beyond the leeway", sign(t, jose.RS256, key, kid, expired)},
			{"not yet valid (nbf in 10 min)", sign(t, jose.RS256, key, kid, early)},
			{"no exp", sign(t, jose.RS256, key, kid, with("exp", nil))},
			{"wrong audience (a real token for another)", p.Token(t, "acme", "elsewhere")},
			{"wrong audience (forged)", sign(t, jose.RS256, key, kid, with("aud", "elsewhere"))},
			{"no audience", sign(t, jose.RS256, key, kid, with("aud", nil))},
			{"an issuer not trusted here (a real token of it)", stranger.Token(t, "acme", "sandbox")},
			{"the provider's key, another iss", sign(t, jose.RS256, key, kid, with("iss", "https://issuer.example/"))},
			{"the provider's key, the untrusted issuer's iss", sign(t, jose.RS256, key, kid, with("iss", stranger.Issuer()))},
			{"the untrusted issuer's key, the trusted iss", sign(t, jose.RS256, strangerKey, kid, good())},
			{"unsigned (alg none)", unsigned(t, map[string]any{"alg": "none", "typ": "JWT"}, good())},
			{"unsigned (alg none, the real kid)", unsigned(t, map[string]any{"alg": "none", "kid": kid}, good())},
			{"unsigned (alg None)", unsigned(t, map[string]any{"alg": "None"}, good())},
			{"HS256 keyed with the public key's PEM (PKIX)", sign(t, jose.HS256, pkix, kid, good())},
			{"HS256 keyed with the public key's PEM (PKCS#1)", sign(t, jose.HS256, pkcs1, kid, good())},
			{"HS256 keyed with the public key's DER", sign(t, jose.HS256, der, kid, good())},
			{"a key the JWKS does not list, the real kid", sign(t, jose.RS256, fresh, kid, good())},
			{"a key the JWKS does not list, a made-up kid", sign(t, jose.RS256, fresh, "made-up", good())},
			{"a key the JWKS does not list, no kid", sign(t, jose.RS256, fresh, "", good())},
			{"a real token with no org", p.Token(t, "", "sandbox")},
			{"an empty org", sign(t, jose.RS256, key, kid, with("org", ""))},
			{"an org that is not a string", sign(t, jose.RS256, key, kid, with("org", []string{"acme"}))},
			{"a real token, its signature cut off", strings.TrimRight(p.Token(t, "acme", "sandbox"), "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := e.do("GET", "/v1/sandbox", c.token, nil)
				if r.Status != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401: %s", r.Status, r.Body)
				}
				// Nothing of the token's claims or the key comes back.
				if strings.Contains(string(r.Body), "BEGIN") || strings.Contains(string(r.Body), c.token) {
					t.Fatalf("the answer repeats the token or key: %s", r.Body)
				}
			})
		}
	})

	// OIDC callers are never admin (docs/api.md, Keys): not of their own org,
	// and not of the operator org, whatever the provider says the org is.
	t.Run("never admin", func(t *testing.T) {
		operator := p.Token(t, "system", "sandbox")
		e.must(http.StatusOK, "GET", "/v1/sandbox", operator, nil)        // a caller of the operator org, as a tenant
		e.must(http.StatusOK, "GET", "/v1/orgs/acme/keys", "system", nil) // the control: the operator's admin key
		for _, c := range []struct{ method, path, token string }{
			{"GET", "/v1/orgs/acme/keys", operator},
			{"POST", "/v1/orgs/acme/keys", operator},
			{"GET", "/v1/orgs/acme/quota", operator},
			{"GET", "/v1/orgs/system/keys", operator},
			{"GET", "/v1/orgs/acme/keys", p.Token(t, "acme", "sandbox")},
			{"POST", "/v1/orgs/acme/keys", p.Token(t, "acme", "sandbox")},
		} {
			var body any
			if c.method == "POST" {
				body = map[string]any{"subject": "minted-by-oidc"}
			}
			if r := e.do(c.method, c.path, c.token, body); r.Status != http.StatusForbidden {
				t.Errorf("%s %s as an OIDC caller: %d, want 403: %s", c.method, c.path, r.Status, r.Body)
			}
		}
	})

	// Inside the leeway (--oidc-leeway, 30 s by default) a token just
	// expired or just about to be valid is still taken: the clocks of two
	// machines differ.
	t.Run("leeway", func(t *testing.T) {
		now := time.Now()
		kid, key := p.SigningKey()
		c := map[string]any{"iss": p.Issuer(), "sub": "caller", "aud": "sandbox", "org": "acme",
			"iat": now.Add(-time.Hour).Unix(), "nbf": now.Add(-time.Hour).Unix(), "exp": now.Add(-10 * time.Second).Unix()}
		e.must(http.StatusOK, "GET", "/v1/sandbox", sign(t, jose.RS256, key, kid, c), nil)
		c["iat"], c["nbf"], c["exp"] = now.Unix(), now.Add(10*time.Second).Unix(), now.Add(time.Hour).Unix()
		e.must(http.StatusOK, "GET", "/v1/sandbox", sign(t, jose.RS256, key, kid, c), nil)
	})

	// The provider rotates its key; the running server takes the new
	// key's tokens without a restart. The server refetches the JWKS on an
	// unknown kid at most every so often (a flood of forged kids must not
	// become a flood of fetches), so a token of the new key may be
	// refused for that long: the test waits out the bound, no more.
	t.Run("rotation", func(t *testing.T) {
		old := p.Token(t, "acme", "sandbox")
		e.must(http.StatusOK, "GET", "/v1/sandbox", old, nil)
		oldKid, _ := p.SigningKey()
		p.Rotate(t)
		if kid, _ := p.SigningKey(); kid == oldKid {
			t.Fatal("Rotate kept the key")
		}
		tok := p.Token(t, "acme", "sandbox")
		start := time.Now()
		for {
			r := e.do("GET", "/v1/sandbox", tok, nil)
			if r.Status == http.StatusOK {
				break
			}
			if r.Status != http.StatusUnauthorized || time.Since(start) > 30*time.Second {
				t.Fatalf("a token of the rotated key, %v after the rotation: %d %s", time.Since(start).Round(time.Second), r.Status, r.Body)
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("the rotated key was taken %v after the rotation", time.Since(start).Round(10*time.Millisecond))
		// The provider still publishes the previous key: its tokens live on.
		e.must(http.StatusOK, "GET", "/v1/sandbox", old, nil)
	})
}

// sign is a JWS in compact form over claims, with go-jose: what a
// provider's clock, a stolen key or an attacker would make.
func sign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unsigned is the alg-none attack: header and claims, an empty signature.
// Built by hand because no JOSE library makes one.
func unsigned(t *testing.T, header, claims map[string]any) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + "."
}

// The flags are honoured: two trusted issuers, another audience
// (--oidc-audience) and another org claim (--oidc-org-claim); each
// issuer's keys verify its own tokens only.
func TestOIDCConfigured(t *testing.T) {
	t.Parallel() // see parallel_test.go
	p, q := testenv.NewOIDCProvider(t), testenv.NewOIDCProvider(t)
	onBackends(t, server.Config{Identity: identity.Config{Issuers: []string{p.Issuer(), q.Issuer()},
		Audience: "platform", OrgClaim: "tenant"}}, func(t *testing.T, e *env) { oidcConfigured(t, e, p, q) })
}

func oidcConfigured(t *testing.T, e *env, p, q *testenv.OIDCProvider) {
	for _, idp := range []*testenv.OIDCProvider{p, q} {
		id := e.lease(idp.TokenWithClaim(t, "platform", "tenant", "globex"), nil)
		e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "globex", nil)
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id, "acme", nil)
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "globex", nil)
	}
	now := time.Now()
	kid, key := q.SigningKey()
	claims := map[string]any{"iss": p.Issuer(), "sub": "caller", "aud": "platform", "tenant": "acme",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for _, c := range []struct{ name, token string }{
		{"the org under the default claim name", p.Token(t, "acme", "platform")},
		{"the default audience", p.TokenWithClaim(t, "sandbox", "tenant", "acme")},
		{"one trusted issuer's key, the other's iss", sign(t, jose.RS256, key, kid, claims)},
	} {
		if r := e.do("GET", "/v1/sandbox", c.token, nil); r.Status != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401: %s", c.name, r.Status, r.Body)
		}
	}
	claims["iss"] = q.Issuer() // the control: the same token, its own iss
	e.must(http.StatusOK, "GET", "/v1/sandbox", sign(t, jose.RS256, key, kid, claims), nil)
}
