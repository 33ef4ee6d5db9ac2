package identity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// The scopes of a lease credential: what its sandbox may do with this
// server's API. A delegated exchange asks for a subset.
const (
	ScopeRead    = "lease:read"  // read its own lease
	ScopeRenew   = "lease:renew" // renew itself, up to the ceiling
	ScopeNarrate = "narrate"     // append to the org's session logs
)

// AllScopes are a lease credential's scopes unless narrowed.
var AllScopes = []string{ScopeRead, ScopeRenew, ScopeNarrate}

// RFC 8693's names.
const (
	GrantTokenExchange  = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccess     = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeJWT        = "urn:ietf:params:oauth:token-type:jwt"
	resourcePrefix      = "urn:sandbox:"
	claimSandbox        = "sandbox_id"
	maxRemoteCredential = 24 * time.Hour
)

// Resource is the RFC 8707 resource naming sandbox id in an exchange.
func Resource(id string) string { return resourcePrefix + id }

// Subjects resolves a subject token (an API key, a trusted JWT, a lease
// credential) to the principal it proves.
type Subjects interface {
	Principal(ctx context.Context, token string) (sandbox.Principal, error)
}

// Leases tells when a sandbox's lease ends; an unknown or ended sandbox is
// KindNotFound.
type Leases interface {
	LeaseEnd(ctx context.Context, org, id string) (time.Time, error)
}

// Issuer is the server's own authorization server.
type Issuer struct {
	cfg      Config
	ring     *ring
	secret   string
	operator string
	log      *slog.Logger
	// Subjects and Leases are set once the rest of the server is built
	// (they verify tokens this issuer signed).
	Subjects Subjects
	Leases   Leases

	limit *limiter // the token endpoint's bounds (limit.go)
}

// NewIssuer opens the issuer's keys in data (made on the first start).
// operatorOrg is the reserved org nothing is minted for.
func NewIssuer(cfg Config, data, operatorOrg string, log *slog.Logger) (*Issuer, error) {
	cfg = cfg.withDefaults()
	if cfg.URL == "" {
		return nil, errors.New("identity: the issuer needs its URL (--issuer-url)")
	}
	// A key is published for as long as a token it signed may live: the
	// longest lease is bounded by the service's ceiling, a day at most by
	// default; a week is ample and still lets old keys go.
	r, err := openRing(filepath.Join(data, "identity", "keys"), cfg.Rotation, cfg.Rotation+7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	path := cfg.ClientSecretFile
	if path == "" {
		path = filepath.Join(data, "identity", "sandbox-client.secret")
	}
	secret, err := loadSecret(path)
	if err != nil {
		return nil, err
	}
	return &Issuer{cfg: cfg, ring: r, secret: secret, operator: operatorOrg, log: log,
		limit: newLimiter(2 * goruntime.GOMAXPROCS(0))}, nil
}

// URL is the issuer's URL (its tokens' iss).
func (is *Issuer) URL() string { return is.cfg.URL }

// ClientSecret is the "sandbox" client's secret, for this server's own
// exchange client (never answered, never logged).
func (is *Issuer) ClientSecret() string { return is.secret }

// Run rotates the signing key on time until ctx ends.
func (is *Issuer) Run(ctx context.Context) {
	every := min(is.cfg.Rotation/4, time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if made, err := is.ring.Rotate(false); err != nil {
				is.log.Error("rotating the issuer's key", "err", err)
			} else if made {
				is.log.Info("the issuer signs with a new key", "kid", is.ring.signing().ID)
			}
		}
	}
}

// ExchangeRequest is an RFC 8693 token exchange request (§2.1) as the
// token endpoint's form carries it.
type ExchangeRequest struct {
	GrantType          string
	ClientID           string
	ClientSecret       string
	SubjectToken       string
	SubjectTokenType   string
	ActorToken         string
	RequestedTokenType string
	Resource           string
	Audience           string
	Scope              string
	// ExpiresAt (the extension parameter sandbox_expires_at, Unix
	// seconds) is the lease's end as the requesting server knows it: taken
	// from the authenticated client only, for a sandbox of another
	// server's.
	ExpiresAt time.Time
}

// Token is the exchange's answer (§2.2.1). There is never a refresh
// token: the credential dies with its lease.
type Token struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	Scope           string `json:"scope"`
	// Expires is when it stops working.
	Expires time.Time `json:"-"`
}

// OAuthError is an error answer of the token endpoint (RFC 6749 §5.2).
type OAuthError struct {
	Code        string `json:"error"`
	Description string `json:"error_description"`
	status      int
}

func (e *OAuthError) Error() string { return e.Code + ": " + e.Description }

func oauthErr(status int, code, format string, args ...any) *OAuthError {
	return &OAuthError{Code: code, Description: fmt.Sprintf(format, args...), status: status}
}

// Exchange performs a token exchange. trusted says the caller is this
// server's own client, in process (the HTTP endpoint authenticates the
// client by its secret instead).
func (is *Issuer) Exchange(ctx context.Context, req ExchangeRequest, trusted bool) (*Token, error) {
	return is.exchange(ctx, req, trusted, nil)
}

// exchange is Exchange; limit, when set (the HTTP endpoint), is charged
// for the sandbox once the subject is known, before anything is signed.
func (is *Issuer) exchange(ctx context.Context, req ExchangeRequest, trusted bool, limit *limiter) (*Token, error) {
	if req.GrantType != GrantTokenExchange {
		return nil, oauthErr(400, "unsupported_grant_type", "this endpoint grants %s only", GrantTokenExchange)
	}
	if req.ClientID != ClientID {
		return nil, oauthErr(401, "invalid_client", "the only client is %q", ClientID)
	}
	// The client with its secret is the server leasing the sandbox; with
	// none it is code in a sandbox narrowing its own credential.
	client := trusted
	if req.ClientSecret != "" {
		if subtle.ConstantTimeCompare([]byte(req.ClientSecret), []byte(is.secret)) != 1 {
			return nil, oauthErr(401, "invalid_client", "the client's secret is wrong")
		}
		client = true
	}
	if req.SubjectTokenType != TokenTypeAccess && req.SubjectTokenType != TokenTypeJWT {
		return nil, oauthErr(400, "invalid_request", "subject_token_type must be %s or %s", TokenTypeAccess, TokenTypeJWT)
	}
	if req.ActorToken != "" {
		return nil, oauthErr(400, "invalid_request", "actor tokens are not taken: the sandbox client is the actor")
	}
	if t := req.RequestedTokenType; t != "" && t != TokenTypeAccess && t != TokenTypeJWT {
		return nil, oauthErr(400, "invalid_request", "requested_token_type must be %s or %s (no refresh tokens)", TokenTypeAccess, TokenTypeJWT)
	}
	id, ok := strings.CutPrefix(req.Resource, resourcePrefix)
	if !ok || id == "" || len(id) > 128 {
		return nil, oauthErr(400, "invalid_target", "resource must name the sandbox: %s<id>", resourcePrefix)
	}
	if req.SubjectToken == "" {
		return nil, oauthErr(400, "invalid_request", "subject_token is required")
	}
	// Without the client's secret the endpoint is anyone's: it takes a
	// sandbox's own credential only, looks up no API key, and refuses
	// every other subject alike (it tells no valid key from a wrong one).
	notSandbox := oauthErr(400, "invalid_grant", "without the client's secret the subject token must be a live sandbox's own credential")
	if !client && !IsJWT(req.SubjectToken) {
		return nil, notSandbox
	}
	p, err := is.Subjects.Principal(ctx, req.SubjectToken)
	switch {
	case err != nil && !client:
		return nil, notSandbox
	case err != nil:
		return nil, oauthErr(400, "invalid_grant", "the subject token is not valid: %s", sandbox.Message(err))
	case !client && !p.Confined():
		return nil, notSandbox
	case p.Org == is.operator:
		return nil, oauthErr(400, "invalid_grant", "the sandbox client never mints for the reserved operator org")
	}
	scopes, err := narrowScopes(req.Scope, p)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var end time.Time
	switch {
	case p.Confined() && p.Sandbox != id:
		return nil, oauthErr(400, "invalid_target", "a sandbox's credential is exchanged for that sandbox only")
	case p.Confined() && !client:
		// Delegation only narrows: never past the subject's own end.
		end = p.Expires
	}
	leaseEnd, err := is.Leases.LeaseEnd(ctx, p.Org, id)
	switch {
	case err == nil:
		end = earliest(end, leaseEnd)
	case sandbox.KindOf(err) == sandbox.KindNotFound && client && !req.ExpiresAt.IsZero():
		// A sandbox of the server that asks: its lease end is its word,
		// bounded.
		end = earliest(end, earliest(req.ExpiresAt, now.Add(maxRemoteCredential)))
	case sandbox.KindOf(err) == sandbox.KindNotFound:
		return nil, oauthErr(400, "invalid_target", "no live sandbox %s in org %q", id, p.Org)
	default:
		return nil, oauthErr(500, "server_error", "the lease could not be read")
	}
	if client && !req.ExpiresAt.IsZero() {
		end = earliest(end, req.ExpiresAt)
	}
	if is.cfg.CredentialTTL > 0 {
		end = earliest(end, now.Add(is.cfg.CredentialTTL))
	}
	// A JWT's exp is whole seconds: the answer's end is the token's.
	end = end.Truncate(time.Second)
	if !end.After(now.Add(time.Second)) {
		return nil, oauthErr(400, "invalid_target", "the lease of %s has ended", id)
	}
	if limit != nil && !limit.allow(p.Org, id) {
		return nil, oauthErr(http.StatusTooManyRequests, "temporarily_unavailable", "too many token exchanges for sandbox %s; retry", id)
	}
	aud := is.cfg.Audience
	if client && req.Audience != "" {
		aud = req.Audience
	}
	tok, err := is.mint(p, id, aud, scopes, now, end)
	if err != nil {
		return nil, oauthErr(500, "server_error", "the token could not be signed")
	}
	return &Token{AccessToken: tok, IssuedTokenType: TokenTypeJWT, TokenType: "Bearer",
		ExpiresIn: int64(end.Sub(now) / time.Second), Scope: strings.Join(scopes, " "), Expires: end}, nil
}

// narrowScopes is the scopes asked (all the subject has when none are):
// never one the subject lacks.
func narrowScopes(asked string, p sandbox.Principal) ([]string, error) {
	have := AllScopes
	if p.Confined() {
		have = p.Scopes
	}
	if strings.TrimSpace(asked) == "" {
		return slices.Clone(have), nil
	}
	var out []string
	for s := range strings.FieldsSeq(asked) {
		if !slices.Contains(have, s) {
			return nil, oauthErr(400, "invalid_scope", "scope %q is not one the subject holds (%s)", s, strings.Join(have, " "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// mint signs a lease credential: sub is who leased, act the sandbox that
// acts for them (RFC 8693 §4.1).
func (is *Issuer) mint(p sandbox.Principal, id, aud string, scopes []string, now, end time.Time) (string, error) {
	k := is.ring.signing()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.JWK},
		(&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		return "", err
	}
	jti := make([]byte, 12)
	rand.Read(jti)
	std := jwt.Claims{
		Issuer: is.cfg.URL, Subject: p.Subject, Audience: jwt.Audience{aud},
		Expiry: jwt.NewNumericDate(end), NotBefore: jwt.NewNumericDate(now), IssuedAt: jwt.NewNumericDate(now),
		ID: hex.EncodeToString(jti),
	}
	private := map[string]any{
		is.cfg.OrgClaim: p.Org,
		claimSandbox:    id,
		"scope":         strings.Join(scopes, " "),
		"client_id":     ClientID,
		"act":           map[string]string{"sub": "sandbox:" + id},
	}
	return jwt.Signed(signer).Claims(std).Claims(private).Serialize()
}

// keySet verifies the issuer's own tokens against its ring, with no
// fetch (go-oidc's KeySet).
type ownKeys struct{ r *ring }

func (k ownKeys) VerifySignature(_ context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("one signature expected")
	}
	key, ok := k.r.lookup(jws.Signatures[0].Header.KeyID)
	if !ok {
		return nil, errors.New("signed by a key this issuer does not have")
	}
	return jws.Verify(key)
}
