package integration_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestLeaseCredentialExchangedElsewhereOnRunsc: with --token-exchange-url
// the exchange is another issuer's. Here that is the embedded issuer of a
// second server process (zitadel's OP, the caller's identity provider,
// grants no exchange that binds a sandbox): the caller signs in at the
// real OIDC provider, leases with its JWT, and the sandbox gets a
// credential of the second server's, that this server takes because it
// trusts that issuer — bound to the sandbox, ending with the lease.
func TestLeaseCredentialExchangedElsewhereOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	idp := testenv.NewOIDCProvider(t)
	raw := make([]byte, 32)
	rand.Read(raw)
	secret := filepath.Join(t.TempDir(), "sandbox-client.secret")
	if err := os.WriteFile(secret, []byte(hex.EncodeToString(raw)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := testenv.ServeBin(t, gvisor.DefaultRunsc(), testenv.Binaries(t), nil,
		"--oidc-issuer", idp.Issuer(), "--sandbox-client-secret-file", secret)
	e := newEnvConfig(t, server.Config{Identity: identity.Config{
		Issuers: []string{idp.Issuer(), other.URL}, ExchangeURL: other.URL + identity.PathToken, ExchangeSecretFile: secret,
	}})

	caller := idp.Token(t, "acme", "sandbox")
	id := e.lease(caller, map[string]any{"ttlSec": 600})
	neighbour := e.lease("acme", map[string]any{"ttlSec": 600})
	sb := e.must(200, "GET", "/v1/sandbox/"+id, caller, nil).JSON(t)
	tok := e.credentialIn(caller, id)
	if tok == "" {
		t.Fatal("no credential from the external exchange")
	}
	// It is the other server's, verified against its published keys.
	var set jose.JSONWebKeySet
	getJSON(t, other.URL+identity.PathJWKS, &set)
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Key(parsed.Headers[0].KeyID)
	var c leaseClaims
	if len(keys) != 1 || parsed.Claims(keys[0].Key, &c) != nil {
		t.Fatalf("the credential does not verify against %s's JWKS", other.URL)
	}
	if c.Issuer != other.URL || c.Org != "acme" || c.Sandbox != id || float64(c.Expiry.Time().Unix()) > sb["expiresAt"].(float64) {
		t.Errorf("claims %+v (lease ends %v)", c, sb["expiresAt"])
	}
	if exp := float64(c.Expiry.Time().Unix()); exp != sb["expiresAt"].(float64) {
		t.Errorf("exp %v, the lease ends at %v", exp, sb["expiresAt"])
	}
	// This server takes it, as that sandbox's only.
	e.must(200, "GET", "/v1/sandbox/"+id, tok, nil)
	e.must(404, "GET", "/v1/sandbox/"+neighbour, tok, nil)
	e.must(403, "POST", "/v1/sandbox/"+id+"/exec", tok, map[string]any{"argv": []string{"true"}})
	// The caller's own JWT reaches the sandbox nowhere.
	e.noSecretIn(caller)
	e.noSecretIn(tok)
	// A caller with this server's API key gets a sandbox with no
	// credential, not a failed lease: the key is never sent to another
	// issuer.
	if got := e.credentialIn("acme", neighbour); got != "" {
		t.Errorf("a credential the exchange should have refused: %.30s…", got)
	}
	if !strings.Contains(e.logs.String(), "only a JWT is sent to --token-exchange-url") {
		t.Errorf("the log does not say why the neighbour has no credential")
	}
	e.must(200, "DELETE", "/v1/sandbox/"+id, caller, nil)
	deadline := time.Now().Add(5 * time.Second)
	for e.do("GET", "/v1/sandbox/"+id, tok, nil).Status != 401 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if r := e.do("GET", "/v1/sandbox/"+id, tok, nil); r.Status != 401 {
		t.Errorf("the credential of an ended lease: %d", r.Status)
	}
}

// TestLeaseCredentialRefusesAnOrdinaryToken: an exchange endpoint that
// answers with an ordinary access token of the caller (a real JWT of the
// trusted provider, as a plain RFC 8693 server would mint) is refused:
// inside the sandbox it would be the org's whole power, not one lease's.
func TestLeaseCredentialRefusesAnOrdinaryToken(t *testing.T) {
	idp := testenv.NewOIDCProvider(t)
	ordinary := idp.Token(t, "acme", "sandbox")
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": ordinary, "token_type": "Bearer",
			"issued_token_type": identity.TokenTypeJWT, "expires_in": 60})
	}))
	defer endpoint.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	e := newEnvConfig(t, server.Config{Identity: identity.Config{
		Issuers: []string{idp.Issuer()}, ExchangeURL: endpoint.URL, ExchangeSecretFile: secret,
	}})
	id := e.lease(idp.Token(t, "acme", "sandbox"), map[string]any{"ttlSec": 600})
	if got := e.credentialIn("acme", id); got != "" {
		t.Errorf("an ordinary access token was written into the sandbox: %.30s…", got)
	}
	if !strings.Contains(e.logs.String(), "is not this sandbox's own credential") {
		t.Errorf("the log does not say why: %.3000s", e.logs.String())
	}
}
