package testenv_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// The harness is proved against the provider with a client library that
// is not the provider's own (go-oidc), as the server's tests will use it.

func TestOIDCProviderDiscovery(t *testing.T) {
	p := testenv.NewOIDCProvider(t)
	if !strings.HasPrefix(p.Issuer(), "http://127.0.0.1:") || !strings.HasSuffix(p.Issuer(), "/") {
		t.Fatalf("issuer %q", p.Issuer())
	}
	var d struct {
		Issuer     string   `json:"issuer"`
		JWKS       string   `json:"jwks_uri"`
		GrantTypes []string `json:"grant_types_supported"`
		Algs       []string `json:"id_token_signing_alg_values_supported"`
	}
	getJSON(t, strings.TrimSuffix(p.Issuer(), "/")+"/.well-known/openid-configuration", &d)
	if d.Issuer != p.Issuer() || d.JWKS != p.JWKSURL() {
		t.Fatalf("discovery: issuer %q, jwks %q; want %q, %q", d.Issuer, d.JWKS, p.Issuer(), p.JWKSURL())
	}
	if !slices.Contains(d.GrantTypes, "client_credentials") || !slices.Equal(d.Algs, []string{"RS256"}) {
		t.Fatalf("discovery: grants %v, algs %v", d.GrantTypes, d.Algs)
	}
	// go-oidc's own discovery agrees (it checks the issuer it was given).
	if _, err := oidc.NewProvider(t.Context(), p.Issuer()); err != nil {
		t.Fatal(err)
	}
}

func TestOIDCProviderToken(t *testing.T) {
	p := testenv.NewOIDCProvider(t)
	prov, err := oidc.NewProvider(t.Context(), p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	v := prov.Verifier(&oidc.Config{ClientID: "sandbox"})

	tok := p.Token(t, "acme", "sandbox")
	idt, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatalf("a token from p.Token does not verify: %v", err)
	}
	var c map[string]any
	if err := idt.Claims(&c); err != nil {
		t.Fatal(err)
	}
	if c["org"] != "acme" || idt.Issuer != p.Issuer() || !slices.Equal(idt.Audience, []string{"sandbox"}) {
		t.Fatalf("claims %v", c)
	}
	if kid, _ := p.SigningKey(); kidOf(t, tok) != kid {
		t.Fatalf("signed by %q, the current key is %q", kidOf(t, tok), kid)
	}
	if ttl := time.Until(idt.Expiry); ttl < time.Minute || ttl > time.Hour {
		t.Fatalf("expires in %v", ttl)
	}

	// Another audience is a real token that this verifier refuses.
	if _, err := v.Verify(t.Context(), p.Token(t, "acme", "elsewhere")); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("a token for another audience: %v", err)
	}
	// No org: no org claim at all, still a valid token.
	idt, err = v.Verify(t.Context(), p.Token(t, "", "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	c = nil
	idt.Claims(&c)
	if _, ok := c["org"]; ok {
		t.Fatalf("an org-less token has claims %v", c)
	}
	// The org under another claim name.
	idt, err = v.Verify(t.Context(), p.TokenWithClaim(t, "sandbox", "tenant", "beta"))
	if err != nil {
		t.Fatal(err)
	}
	c = nil
	idt.Claims(&c)
	if _, ok := c["org"]; ok || c["tenant"] != "beta" {
		t.Fatalf("claims %v", c)
	}
}

func TestOIDCProviderRotate(t *testing.T) {
	p := testenv.NewOIDCProvider(t)
	prov, err := oidc.NewProvider(t.Context(), p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	v := prov.Verifier(&oidc.Config{ClientID: "sandbox"})
	old := p.Token(t, "acme", "sandbox")
	if _, err := v.Verify(t.Context(), old); err != nil { // the verifier caches the first key
		t.Fatal(err)
	}
	k1 := kidOf(t, old)

	p.Rotate(t)
	tok := p.Token(t, "acme", "sandbox")
	k2 := kidOf(t, tok)
	if kid, _ := p.SigningKey(); k2 == k1 || k2 != kid {
		t.Fatalf("after Rotate signed by %q (before %q, current %q)", k2, k1, kid)
	}
	// The same verifier: it meets an unknown kid and refetches the JWKS.
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("a token signed with the rotated key: %v", err)
	}
	if _, err := v.Verify(t.Context(), old); err != nil {
		t.Fatalf("the previous key is still published, its token: %v", err)
	}
	if got := jwksKids(t, p); !slices.Equal(got, []string{k2, k1}) {
		t.Fatalf("JWKS %v, want [%s %s]", got, k2, k1)
	}
	p.Rotate(t)
	k3, _ := p.SigningKey()
	if got := jwksKids(t, p); !slices.Equal(got, []string{k3, k2}) {
		t.Fatalf("JWKS after a second rotation %v, want [%s %s]", got, k3, k2)
	}
}

// SigningKey is the key the provider really signs with: a token signed
// with it verifies, and the same one expired is refused for that alone.
func TestOIDCProviderSigningKey(t *testing.T) {
	p := testenv.NewOIDCProvider(t)
	prov, err := oidc.NewProvider(t.Context(), p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	v := prov.Verifier(&oidc.Config{ClientID: "sandbox"})
	kid, key := p.SigningKey()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(exp time.Time) string {
		t.Helper()
		s, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: p.Issuer(), Subject: "x", Audience: jwt.Audience{"sandbox"},
			IssuedAt: jwt.NewNumericDate(exp.Add(-time.Hour)), Expiry: jwt.NewNumericDate(exp)}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := v.Verify(t.Context(), sign(time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("signed with SigningKey: %v", err)
	}
	if _, err := v.Verify(t.Context(), sign(time.Now().Add(-10*time.Minute))); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired, signed with SigningKey: %v", err)
	}
}

// Two providers in one test are two issuers with their own keys.
func TestOIDCProviderTwo(t *testing.T) {
	a, b := testenv.NewOIDCProvider(t), testenv.NewOIDCProvider(t)
	if a.Issuer() == b.Issuer() {
		t.Fatal("one issuer")
	}
	ka, _ := a.SigningKey()
	kb, _ := b.SigningKey()
	if ka == kb {
		t.Fatal("one key")
	}
	prov, err := oidc.NewProvider(t.Context(), a.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Verifier(&oidc.Config{ClientID: "sandbox"}).Verify(t.Context(), b.Token(t, "acme", "sandbox")); err == nil {
		t.Fatal("the first provider's verifier took the second's token")
	}
}

func kidOf(t *testing.T, tok string) string {
	t.Helper()
	jws, err := jose.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	return jws.Signatures[0].Header.KeyID
}

func jwksKids(t *testing.T, p *testenv.OIDCProvider) []string {
	t.Helper()
	var set jose.JSONWebKeySet
	getJSON(t, p.JWKSURL(), &set)
	var kids []string
	for _, k := range set.Keys {
		if !k.IsPublic() || k.Use != "sig" || k.Algorithm != "RS256" {
			t.Fatalf("JWKS key %+v", k)
		}
		kids = append(kids, k.KeyID)
	}
	return kids
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
