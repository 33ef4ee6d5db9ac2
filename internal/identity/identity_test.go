package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// keys is a stand-in key table for the unit tests of the exchange rules
// (the integration tests use the real store).
type keys map[string]sandbox.Principal

func (k keys) Principal(_ context.Context, token string) (sandbox.Principal, error) {
	if p, ok := k[token]; ok {
		return p, nil
	}
	return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "invalid API key")
}

type leases map[string]time.Time

func (l leases) LeaseEnd(_ context.Context, org, id string) (time.Time, error) {
	if end, ok := l[org+"/"+id]; ok {
		return end, nil
	}
	return time.Time{}, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
}

type fixture struct {
	is   *Issuer
	auth *Authenticator
	end  time.Time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	cfg := Config{URL: "http://127.0.0.1:1"}
	is, err := NewIssuer(cfg, t.TempDir(), "system", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	l := leases{"acme/sb_1": end, "acme/sb_2": end}
	a := &Authenticator{Keys: keys{"sbk_acme": {Org: "acme", Subject: "alice"}, "sbk_system": {Org: "system", Subject: "op", Admin: true}}}
	a.Verifier = NewVerifier(cfg, is, l, slog.New(slog.DiscardHandler))
	is.Subjects, is.Leases = a, l
	return &fixture{is: is, auth: a, end: end}
}

func TestExchangeRules(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok, err := f.is.LeaseCredential(ctx, "sbk_acme", "sb_1", f.end.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Expires.Equal(f.end) {
		t.Errorf("asked past the lease: expires %v, the lease ends %v", tok.Expires, f.end)
	}
	p, err := f.auth.Principal(ctx, tok.AccessToken)
	if err != nil || p.Org != "acme" || p.Sandbox != "sb_1" || strings.Join(p.Scopes, " ") != "lease:read lease:renew narrate" || p.Subject != "alice" {
		t.Fatalf("the credential's principal: %+v %v", p, err)
	}
	base := ExchangeRequest{GrantType: GrantTokenExchange, ClientID: ClientID, SubjectToken: tok.AccessToken, SubjectTokenType: TokenTypeJWT, Resource: Resource("sb_1")}
	narrow := base
	narrow.Scope = "lease:read"
	n, err := f.is.Exchange(ctx, narrow, false)
	if err != nil || n.Scope != "lease:read" || n.Expires.After(tok.Expires) {
		t.Fatalf("narrowing: %+v %v", n, err)
	}
	for name, tc := range map[string]struct {
		mod     func(*ExchangeRequest)
		trusted bool
		code    string
	}{
		"operator key":       {func(r *ExchangeRequest) { r.SubjectToken, r.SubjectTokenType = "sbk_system", TokenTypeAccess }, true, "invalid_grant"},
		"key without secret": {func(r *ExchangeRequest) { r.SubjectToken, r.SubjectTokenType = "sbk_acme", TokenTypeAccess }, false, "invalid_grant"},
		"wrong secret":       {func(r *ExchangeRequest) { r.ClientSecret = "nope" }, false, "invalid_client"},
		"other sandbox":      {func(r *ExchangeRequest) { r.Resource = Resource("sb_2") }, false, "invalid_target"},
		"unknown sandbox by key": {func(r *ExchangeRequest) {
			r.SubjectToken, r.SubjectTokenType, r.Resource = "sbk_acme", TokenTypeAccess, Resource("sb_9")
		}, true, "invalid_target"},
		"wider scope":   {func(r *ExchangeRequest) { r.SubjectToken, r.Scope = n.AccessToken, "lease:renew" }, false, "invalid_scope"},
		"unknown scope": {func(r *ExchangeRequest) { r.Scope = "admin" }, false, "invalid_scope"},
		"refresh":       {func(r *ExchangeRequest) { r.RequestedTokenType = "urn:ietf:params:oauth:token-type:refresh_token" }, false, "invalid_request"},
		"grant":         {func(r *ExchangeRequest) { r.GrantType = "client_credentials" }, false, "unsupported_grant_type"},
		"client":        {func(r *ExchangeRequest) { r.ClientID = "web" }, false, "invalid_client"},
		"no resource":   {func(r *ExchangeRequest) { r.Resource = "" }, false, "invalid_target"},
		"bad subject":   {func(r *ExchangeRequest) { r.SubjectToken = "sbk_nobody" }, false, "invalid_grant"},
		"actor":         {func(r *ExchangeRequest) { r.ActorToken = "x" }, false, "invalid_request"},
		"subject type":  {func(r *ExchangeRequest) { r.SubjectTokenType = "urn:x" }, false, "invalid_request"},
		"an expired lease": {func(r *ExchangeRequest) {
			r.SubjectToken, r.SubjectTokenType, r.ExpiresAt = "sbk_acme", TokenTypeAccess, time.Now()
		}, true, "invalid_target"},
	} {
		r := base
		tc.mod(&r)
		_, err := f.is.Exchange(ctx, r, tc.trusted)
		oe, ok := err.(*OAuthError)
		if !ok || oe.Code != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	// The server's own client may carry a sandbox of another server's,
	// bounded by its word and a day.
	remote := ExchangeRequest{GrantType: GrantTokenExchange, ClientID: ClientID, ClientSecret: f.is.ClientSecret(), SubjectToken: "sbk_acme",
		SubjectTokenType: TokenTypeAccess, Resource: Resource("sb_elsewhere"), ExpiresAt: time.Now().Add(72 * time.Hour)}
	r, err := f.is.Exchange(ctx, remote, false)
	if err != nil || r.Expires.After(time.Now().Add(maxRemoteCredential+time.Second)) {
		t.Errorf("a remote sandbox's credential: %+v %v", r, err)
	}
}

func TestRotation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old, err := f.is.LeaseCredential(ctx, "sbk_acme", "sb_1", f.end)
	if err != nil {
		t.Fatal(err)
	}
	first := f.is.ring.signing().ID
	if made, err := f.is.ring.Rotate(true); err != nil || !made {
		t.Fatal(made, err)
	}
	if f.is.ring.signing().ID == first || len(f.is.ring.public().Keys) != 2 {
		t.Fatalf("after a rotation: signing %s, %d published", f.is.ring.signing().ID, len(f.is.ring.public().Keys))
	}
	if _, err := f.auth.Principal(ctx, old.AccessToken); err != nil {
		t.Errorf("a token of the previous key, after the rotation: %v", err)
	}
	// Reopened from disk, the keys are the same; the files are 0600.
	r, err := openRing(f.is.ring.dir, time.Hour, time.Hour)
	if err != nil || len(r.keys) != 2 || r.signing().ID != f.is.ring.signing().ID {
		t.Fatalf("reopened: %v %+v", err, r)
	}
	names, _ := filepath.Glob(filepath.Join(f.is.ring.dir, "*.json"))
	for _, n := range names {
		if st, _ := os.Stat(n); st.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v", n, st.Mode().Perm())
		}
	}
	// Past its keeping, the old key goes and its tokens with it.
	f.is.ring.now = func() time.Time { return time.Now().Add(f.is.ring.keep + time.Hour) }
	f.is.ring.Rotate(false)
	if _, ok := f.is.ring.lookup(first); ok {
		t.Error("a key past its keeping is still published")
	}
	for _, k := range f.is.ring.public().Keys {
		b, _ := json.Marshal(k)
		if strings.Contains(string(b), `"d"`) {
			t.Errorf("the JWKS carries a private key: %s", b)
		}
	}
}

// TestForged: tokens an attacker can make are refused: unsigned,
// HS256 keyed with the public key, another key under the real kid.
func TestForged(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	good, _ := f.is.LeaseCredential(ctx, "sbk_acme", "sb_1", f.end)
	sk := f.is.ring.signing()
	pub := sk.JWK.Public()
	claims := map[string]any{"iss": f.is.URL(), "aud": "sandbox", "sub": "x", "org": "acme", "exp": time.Now().Add(time.Hour).Unix()}
	payload, _ := json.Marshal(claims)
	b64 := base64.RawURLEncoding.EncodeToString
	forged := []string{
		b64([]byte(`{"alg":"none"}`)) + "." + b64(payload) + ".",
		b64([]byte(`{"alg":"none","kid":"`+pub.KeyID+`"}`)) + "." + b64(payload) + ".",
	}
	der, _ := x509.MarshalPKIXPublicKey(pub.Key)
	for _, secret := range [][]byte{der, []byte(mustJSON(pub))} {
		s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret}, (&jose.SignerOptions{}).WithHeader("kid", pub.KeyID))
		tok, _ := jwt.Signed(s).Claims(claims).Serialize()
		forged = append(forged, tok)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, kid := range []string{pub.KeyID, "made-up"} {
		s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: other, KeyID: kid}}, nil)
		tok, _ := jwt.Signed(s).Claims(claims).Serialize()
		forged = append(forged, tok)
	}
	parts := strings.Split(good.AccessToken, ".")
	forged = append(forged, parts[0]+"."+b64(payload)+"."+parts[2]) // a real signature over other claims
	for i, tok := range forged {
		if p, err := f.auth.Principal(ctx, tok); err == nil || sandbox.KindOf(err) != sandbox.KindUnauthorized {
			t.Errorf("forged token %d: %+v %v", i, p, err)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzBearer: whatever the bearer, the authenticator answers a principal
// only for a token this issuer signed (or a known key), and never panics.
func FuzzBearer(f *testing.F) {
	fx := newFixture(f)
	good, _ := fx.is.LeaseCredential(context.Background(), "sbk_acme", "sb_1", fx.end)
	valid := map[string]bool{good.AccessToken: true, "sbk_acme": true, "sbk_system": true}
	for s := range valid {
		f.Add(s)
	}
	for _, s := range []string{"", ".", "..", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", "eyJhbGciOiJIUzI1NiJ9.e30.x", good.AccessToken + "x", strings.Repeat(".", 3)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		p, err := fx.auth.Principal(context.Background(), token)
		if err == nil && !valid[token] {
			t.Fatalf("a principal for a token nobody signed: %q → %+v", token, p)
		}
		if err != nil && sandbox.KindOf(err) != sandbox.KindUnauthorized {
			t.Fatalf("a refusal that is not a 401: %v", err)
		}
		IsJWT(token)
		IssuerOf(token)
	})
}

// FuzzTokenEndpoint: whatever the form, the endpoint answers an OAuth
// error or, only for a form that is a valid exchange, a token; never a
// 500, never a panic, never a refresh token.
func FuzzTokenEndpoint(f *testing.F) {
	fx := newFixture(f)
	good, _ := fx.is.LeaseCredential(context.Background(), "sbk_acme", "sb_1", fx.end)
	valid := url.Values{"grant_type": {GrantTokenExchange}, "client_id": {ClientID}, "subject_token": {good.AccessToken},
		"subject_token_type": {TokenTypeJWT}, "resource": {Resource("sb_1")}, "scope": {"lease:read"}}.Encode()
	for _, s := range []string{valid, "", "grant_type=x", valid + "&scope=lease:read", valid + "&sandbox_expires_at=-1", "%zz", strings.Repeat("a=b&", 100)} {
		f.Add(s, "")
	}
	f.Add(valid, "c2FuZGJveDp3cm9uZw==")
	f.Fuzz(func(t *testing.T, body, basic string) {
		r := httptest.NewRequest("POST", PathToken, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if basic != "" {
			r.Header.Set("Authorization", "Basic "+basic)
		}
		w := httptest.NewRecorder()
		fx.is.ServeToken(w, r)
		var ans map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
			t.Fatalf("%d, not JSON: %q", w.Code, w.Body.String())
		}
		switch {
		case w.Code >= 500:
			t.Fatalf("a 5xx for %q: %v", body, ans)
		case w.Code == 200 && (ans["access_token"] == nil || ans["refresh_token"] != nil):
			t.Fatalf("a 200 that is not a token: %v", ans)
		case w.Code != 200 && ans["error"] == nil:
			t.Fatalf("%d without an error: %v", w.Code, ans)
		}
	})
}
