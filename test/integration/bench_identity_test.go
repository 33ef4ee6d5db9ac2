package integration_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// BenchmarkLeaseCredential: lease p50 with the credential (an RFC 8693
// exchange and one exec writing it) vs the same server kind without
// (--no-lease-credential), both servers up for the whole run.
func BenchmarkLeaseCredential(b *testing.B) {
	without := newEnvConfig(b, server.Config{Identity: identity.Config{NoCredential: true}})
	with := benchEnv(b)
	b.Run("lease/none", func(b *testing.B) { measure(b, nil, func() func() { return without.leaseTimed(nil) }) })
	b.Run("lease/credential", func(b *testing.B) { measure(b, nil, func() func() { return with.leaseTimed(nil) }) })
	// The write is after the answer and before the first command: what a
	// caller waits for the credential is here.
	leaseExec := func(e *env) func() func() {
		return func() func() {
			end := e.leaseTimed(nil)
			ids := e.must(http.StatusOK, "GET", "/v1/sandbox?limit=1", "acme", nil).JSON(b)["sandboxes"].([]any)
			e.exec("acme", ids[0].(map[string]any)["id"].(string), map[string]any{"argv": []string{"true"}})
			return end
		}
	}
	b.Run("lease+exec/none", func(b *testing.B) { measure(b, nil, leaseExec(without)) })
	b.Run("lease+exec/credential", func(b *testing.B) { measure(b, nil, leaseExec(with)) })
}

// BenchmarkAuth: what resolving one bearer costs the server — an API
// key (a control-database lookup), the server's own lease credential
// (remembered once verified, and its lease looked up), a JWT of an
// external OIDC provider (zitadel's OP) remembered, and one it has not
// seen (an RS256 verification against the cached JWKS) — and one GET of
// a sandbox with each, end to end.
func BenchmarkAuth(b *testing.B) {
	idp := testenv.NewOIDCProvider(b)
	e := newEnvConfig(b, server.Config{Identity: identity.Config{Issuers: []string{idp.Issuer()}}})
	id := e.lease("acme", map[string]any{"ttlSec": 3600})
	bearers := map[string]string{"key": e.keys["acme"], "credential": e.credentialIn("acme", id), "oidc": idp.Token(b, "acme", "sandbox")}
	ctx := context.Background()
	for _, name := range []string{"key", "credential", "oidc"} {
		tok := bearers[name]
		if _, err := e.srv.Auth.Principal(ctx, tok); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Run("principal/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := e.srv.Auth.Principal(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// A JWT the server has not seen yet: the signature verified, not
	// remembered (a fresh token from the provider each time, untimed).
	b.Run("principal/oidc-first", func(b *testing.B) {
		var tok string
		measure(b, func() { tok = idp.Token(b, "acme", "sandbox") }, func() func() {
			if _, err := e.srv.Auth.Principal(ctx, tok); err != nil {
				b.Fatal(err)
			}
			return nil
		})
	})
	for _, name := range []string{"key", "credential", "oidc"} {
		tok := bearers[name]
		b.Run("get/"+name, func(b *testing.B) {
			for b.Loop() {
				req, _ := http.NewRequest("GET", e.http.URL+"/v1/sandbox/"+id, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := http.DefaultClient.Do(req)
				if err != nil || res.StatusCode != 200 {
					b.Fatalf("%v %v", res, err)
				}
				res.Body.Close()
			}
		})
	}
}
