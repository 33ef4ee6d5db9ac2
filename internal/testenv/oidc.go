package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OIDCProvider is a real OpenID provider that nobody here wrote, playing
// an external issuer: zitadel/oidc's OpenID-certified op package, served
// by its example server (exampleop.SetupServer) over the example's
// in-memory storage, on a loopback port, for one test. The only
// configuration is what a deployer of it would add: one confidential
// client whose client_credentials access tokens are JWTs naming an org,
// and signing keys that can be rotated (see oidcStorage).
type OIDCProvider struct {
	issuer string
	jwks   string
	token  string // the token endpoint, as discovery names it
	store  *oidcStorage
}

// The one confidential client of an OIDCProvider.
const (
	OIDCClientID     = "sandbox-tests"
	oidcClientSecret = "sandbox-tests-secret"
)

// Scopes the client may ask for that become claims of its access token.
// They are how a test picks, per token, what a real provider would take
// from its own configuration (the client's project, the user's
// organisation): Zitadel's own audience scope works the same way.
const (
	audScope   = "aud:"   // aud:X — the token's audience is X
	claimScope = "claim:" // claim:NAME:VALUE — the token carries NAME = VALUE
)

// NewOIDCProvider starts a provider on 127.0.0.1 and a free port, with
// its issuer "http://127.0.0.1:PORT/" (plain http is allowed by the
// example's op.WithAllowInsecure), and stops it at the test's end.
func NewOIDCProvider(t testing.TB) *OIDCProvider {
	t.Helper()
	// The issuer names the port, and the provider is built from the
	// issuer: listen first, serve once it is built.
	srv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + srv.Listener.Addr().String() + "/"
	store := newOIDCStorage(issuer)
	// A nil logger: SetupServer would make any other one the process's
	// slog default.
	srv.Config.Handler = exampleop.SetupServer(issuer, store, nil, false)
	srv.Start()
	t.Cleanup(srv.Close)

	p := &OIDCProvider{issuer: issuer, store: store}
	res, err := http.Get(strings.TrimSuffix(issuer, "/") + oidc.DiscoveryEndpoint)
	if err != nil {
		t.Fatalf("the provider's discovery: %v", err)
	}
	defer res.Body.Close()
	var d oidc.DiscoveryConfiguration
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the provider's discovery: %s, %v", res.Status, err)
	}
	if d.Issuer != issuer {
		t.Fatalf("the provider's discovery names issuer %q, not %q", d.Issuer, issuer)
	}
	p.jwks, p.token = d.JwksURI, d.TokenEndpoint
	return p
}

// Issuer is the provider's issuer URL, exactly as its tokens' iss and its
// discovery name it (with the trailing slash).
func (p *OIDCProvider) Issuer() string { return p.issuer }

// JWKSURL is where the provider publishes its keys.
func (p *OIDCProvider) JWKSURL() string { return p.jwks }

// Token is a real access token from the provider's token endpoint
// (client_credentials, client authenticated by HTTP basic auth): a JWT
// signed with its current key, aud = audience (the client id when
// empty), with the claim "org" = org, or no org claim at all when org is
// empty. It fails the test if the provider does not issue it.
func (p *OIDCProvider) Token(t testing.TB, org, audience string) string {
	t.Helper()
	if org == "" {
		return p.TokenWithClaim(t, audience, "", "")
	}
	return p.TokenWithClaim(t, audience, "org", org)
}

// TokenWithClaim is Token with the org under another claim name (a server
// configured with --oidc-org-claim NAME). claim "" asks for no extra
// claim. Neither claim nor value may hold a space (they travel as a scope).
func (p *OIDCProvider) TokenWithClaim(t testing.TB, audience, claim, value string) string {
	t.Helper()
	var scopes []string
	if audience != "" {
		scopes = append(scopes, audScope+audience)
	}
	if claim != "" {
		scopes = append(scopes, claimScope+claim+":"+value)
	}
	cfg := clientcredentials.Config{ClientID: OIDCClientID, ClientSecret: oidcClientSecret,
		TokenURL: p.token, Scopes: scopes, AuthStyle: oauth2.AuthStyleInHeader}
	tok, err := cfg.Token(t.Context())
	if err != nil {
		t.Fatalf("a token from the provider: %v", err)
	}
	return tok.AccessToken
}

// Rotate makes the provider sign with a fresh RSA key from now on. Its
// JWKS then lists the new key and the one before it, as a real provider
// keeps publishing a retired key while tokens it signed are still alive;
// the key before that is dropped.
func (p *OIDCProvider) Rotate(t testing.TB) {
	t.Helper()
	if err := p.store.rotate(); err != nil {
		t.Fatal(err)
	}
}

// SigningKey is the provider's current private key and its kid. A
// provider never issues an expired or a not-yet-valid token; a test signs
// one with this key (with go-jose) to see that it is refused for its
// times alone.
func (p *OIDCProvider) SigningKey() (kid string, key *rsa.PrivateKey) {
	k := p.store.current()
	return k.id, k.key
}

// oidcStorage is the example's storage with what the example lacks for
// playing a deployer's issuer, and nothing else overridden.
type oidcStorage struct {
	*storage.Storage
	client op.Client

	mu   sync.Mutex
	keys []rsaKey // the current key first, then the previous one
}

var (
	_ exampleop.Storage           = (*oidcStorage)(nil)
	_ op.ClientCredentialsStorage = (*oidcStorage)(nil)
)

func newOIDCStorage(issuer string) *oidcStorage {
	// Our own (empty) client table, not the example's package-level one
	// that RegisterClients fills: two providers in one test stay apart.
	s := &oidcStorage{Storage: storage.NewStorageWithClients(storage.NewUserStore(issuer), map[string]*storage.Client{}),
		client: jwtClient{storage.WebClient(OIDCClientID, oidcClientSecret)}}
	if err := s.rotate(); err != nil {
		panic(err) // crypto/rand failed
	}
	return s
}

// jwtClient is the confidential client. The example's clients are either
// for the code flow (WebClient) or give opaque bearer tokens (its service
// user "sid1"); a resource server that verifies tokens offline needs
// JWTs, which Zitadel and others give a client configured for them.
type jwtClient struct{ *storage.Client }

func (jwtClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

// ClientCredentials authenticates the confidential client; the example's
// only looks in its table of service users, whose tokens are opaque.
func (s *oidcStorage) ClientCredentials(_ context.Context, clientID, clientSecret string) (op.Client, error) {
	if clientID != OIDCClientID || clientSecret != oidcClientSecret {
		return nil, errors.New("wrong client or secret")
	}
	return s.client, nil
}

// ClientCredentialsTokenRequest sets the token's audience from an aud:
// scope; the example's is always the client id.
func (s *oidcStorage) ClientCredentialsTokenRequest(_ context.Context, clientID string, scopes []string) (op.TokenRequest, error) {
	if clientID != OIDCClientID {
		return nil, errors.New("wrong client")
	}
	req := &oidc.JWTTokenRequest{Subject: clientID, Audience: []string{clientID}, Scopes: scopes}
	for _, sc := range scopes {
		if a, ok := strings.CutPrefix(sc, audScope); ok {
			req.Audience = []string{a}
		}
	}
	return req, nil
}

// GetPrivateClaimsFromScopes is where op asks for a JWT access token's
// own claims: one per claim: scope, beside the example's.
func (s *oidcStorage) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil {
		return nil, err
	}
	for _, sc := range scopes {
		if nv, ok := strings.CutPrefix(sc, claimScope); ok {
			name, value, _ := strings.Cut(nv, ":")
			if claims == nil {
				claims = map[string]any{}
			}
			claims[name] = value
		}
	}
	return claims, nil
}

// SigningKey, SignatureAlgorithms and KeySet replace the example's one
// key, made once in NewStorage and never rotated, with the rotating set.
func (s *oidcStorage) SigningKey(context.Context) (op.SigningKey, error) {
	k := s.current()
	return &k, nil
}

func (s *oidcStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *oidcStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		keys[i] = rsaPublic{k}
	}
	return keys, nil
}

func (s *oidcStorage) current() rsaKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[0]
}

func (s *oidcStorage) rotate() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append([]rsaKey{{id: rand.Text(), key: key}}, s.keys...)[:min(len(s.keys)+1, 2)]
	return nil
}

// rsaKey is an RS256 signing key as op.SigningKey; rsaPublic is its
// public half as op.Key, what the JWKS lists.
type rsaKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *rsaKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *rsaKey) Key() any                                    { return k.key }
func (k *rsaKey) ID() string                                  { return k.id }

type rsaPublic struct{ k rsaKey }

func (p rsaPublic) ID() string                         { return p.k.id }
func (p rsaPublic) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (p rsaPublic) Use() string                        { return "sig" }
func (p rsaPublic) Key() any                           { return &p.k.key.PublicKey }
