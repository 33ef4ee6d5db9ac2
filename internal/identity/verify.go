package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// asymmetric are the signature algorithms a JWT may use here: never none,
// never an HMAC (whose "secret" an attacker would take from the JWKS).
var asymmetric = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// IsJWT reports whether a bearer has a JWT's shape (three dot-separated
// parts); an API key has no dot. An unsigned JWT (an empty third part)
// has the shape too, so it is refused as a JWT, not looked up as a key.
func IsJWT(token string) bool { return strings.Count(token, ".") == 2 }

// IssuerOf is the iss of a JWT, read without verifying it: only to pick
// which issuer's keys verify it. A token that does not parse as a JWS
// signed by an asymmetric algorithm is an error.
func IssuerOf(token string) (string, error) {
	t, err := jwt.ParseSigned(token, asymmetric)
	if err != nil {
		return "", err
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := t.UnsafeClaimsWithoutVerification(&c); err != nil {
		return "", err
	}
	if c.Issuer == "" {
		return "", errors.New("no iss")
	}
	return c.Issuer, nil
}

// Verifier turns JWTs of the trusted issuers (the server's own and the
// --oidc-issuer ones) into principals.
type Verifier struct {
	cfg    Config
	own    *oidc.IDTokenVerifier // nil without an issuer
	remote map[string]*remote
	leases Leases
	log    *slog.Logger

	// verified remembers tokens whose signature and claims checked out,
	// by their hash, for a few minutes at most: an RS256 verification is
	// ten times an API key's lookup, and a client sends one token many
	// times. A lease credential's lease is still looked up every time.
	mu       sync.Mutex
	verified map[[32]byte]verifiedToken
}

type verifiedToken struct {
	p     sandbox.Principal
	until time.Time
}

// Bounds of the verified-token memory.
const (
	verifiedMax = 4096
	verifiedFor = 5 * time.Minute
)

// NewVerifier builds the verifier. own may be nil; leases confirms a lease
// credential's sandbox is still live (the credential is revoked with it).
// The external issuers are discovered on first use, so a server starts
// while its identity provider is down.
func NewVerifier(cfg Config, own *Issuer, leases Leases, log *slog.Logger) *Verifier {
	cfg = cfg.withDefaults()
	v := &Verifier{cfg: cfg, remote: map[string]*remote{}, leases: leases, log: log}
	if own != nil {
		v.own = oidc.NewVerifier(own.URL(), ownKeys{own.ring}, v.oidcConfig([]string{string(jose.RS256)}))
	}
	for _, iss := range cfg.Issuers {
		v.remote[iss] = &remote{issuer: iss, v: v}
	}
	return v
}

// oidcConfig is go-oidc's check of aud, exp and the algorithm. Its clock
// runs Leeway behind, so exp gets the leeway; nbf is checked in claims
// with the same leeway (go-oidc's own allows five minutes).
func (v *Verifier) oidcConfig(algs []string) *oidc.Config {
	return &oidc.Config{ClientID: v.cfg.Audience, SupportedSigningAlgs: algs,
		Now: func() time.Time { return time.Now().Add(-v.cfg.Leeway) }}
}

// Principal verifies token and maps its claims: the org from OrgClaim, a
// lease credential's sandbox and scopes. Every refusal is KindUnauthorized.
func (v *Verifier) Principal(ctx context.Context, token string) (sandbox.Principal, error) {
	sum := sha256.Sum256([]byte(token))
	v.mu.Lock()
	hit, ok := v.verified[sum]
	v.mu.Unlock()
	if ok && time.Now().Before(hit.until) {
		return v.live(ctx, hit.p)
	}
	p, err := v.verify(ctx, token)
	if err != nil {
		return p, err
	}
	until := earliest(time.Now().Add(verifiedFor), p.Expires.Add(v.cfg.Leeway))
	v.mu.Lock()
	if v.verified == nil || len(v.verified) >= verifiedMax {
		v.verified = map[[32]byte]verifiedToken{} // a flood of tokens starts the memory over
	}
	v.verified[sum] = verifiedToken{p: p, until: until}
	v.mu.Unlock()
	return v.live(ctx, p)
}

// live refuses a lease credential whose lease has ended: it is revoked
// with it, at once, not at its exp.
func (v *Verifier) live(ctx context.Context, p sandbox.Principal) (sandbox.Principal, error) {
	if !p.Confined() {
		return p, nil
	}
	if _, err := v.leases.LeaseEnd(ctx, p.Org, p.Sandbox); err != nil {
		if sandbox.KindOf(err) == sandbox.KindNotFound {
			return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "the sandbox of this credential has ended")
		}
		return sandbox.Principal{}, err
	}
	p.Scopes = slices.Clone(p.Scopes)
	return p, nil
}

// verify checks token's signature and claims.
func (v *Verifier) verify(ctx context.Context, token string) (sandbox.Principal, error) {
	iss, err := IssuerOf(token)
	if err != nil {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "invalid token: not a JWT signed with an asymmetric key")
	}
	var ver *oidc.IDTokenVerifier
	switch r := v.remote[iss]; {
	case v.own != nil && iss == v.cfg.URL:
		ver = v.own
	case r != nil:
		if ver, err = r.verifier(ctx); err != nil {
			v.log.Warn("an OIDC issuer could not be discovered", "issuer", iss, "err", err)
			return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "the token's issuer %q cannot be reached to verify it", iss)
		}
	default:
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "invalid token: issuer %q is not trusted here", iss)
	}
	tok, err := ver.Verify(ctx, token)
	if err != nil {
		var exp *oidc.TokenExpiredError
		if errors.As(err, &exp) {
			return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "the token has expired")
		}
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "invalid token: %s", strings.TrimPrefix(err.Error(), "oidc: "))
	}
	var c map[string]any
	if err := tok.Claims(&c); err != nil {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "invalid token: its claims do not parse")
	}
	if nbf, ok := c["nbf"].(float64); ok && time.Unix(int64(nbf), 0).After(time.Now().Add(v.cfg.Leeway)) {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "invalid token: not valid yet (nbf)")
	}
	org, _ := c[v.cfg.OrgClaim].(string)
	if strings.TrimSpace(org) == "" || len(org) > 128 {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "the token names no org (claim %q)", v.cfg.OrgClaim)
	}
	p := sandbox.Principal{Org: org, Subject: tok.Subject, Expires: tok.Expiry}
	if id, _ := c[claimSandbox].(string); id != "" {
		p.Sandbox = id
		scope, _ := c["scope"].(string)
		for s := range strings.FieldsSeq(scope) {
			if slices.Contains(AllScopes, s) && !slices.Contains(p.Scopes, s) {
				p.Scopes = append(p.Scopes, s)
			}
		}
	}
	return p, nil
}

// remote is an external issuer, discovered on first use.
type remote struct {
	issuer string
	v      *Verifier

	mu    sync.Mutex
	ver   *oidc.IDTokenVerifier
	tried time.Time
	err   error
}

// retryDiscovery spaces the attempts to discover an issuer that failed:
// a flood of tokens naming it does not become a flood of requests to it.
const retryDiscovery = 5 * time.Second

func (r *remote) verifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ver != nil {
		return r.ver, nil
	}
	if time.Since(r.tried) < retryDiscovery {
		return nil, r.err
	}
	r.tried = time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	prov, err := oidc.NewProvider(dctx, r.issuer)
	if err != nil {
		r.err = err
		return nil, err
	}
	var meta struct {
		JWKS string   `json:"jwks_uri"`
		Algs []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := prov.Claims(&meta); err != nil || meta.JWKS == "" {
		r.err = fmt.Errorf("discovery names no jwks_uri: %v", err)
		return nil, r.err
	}
	var algs []string
	for _, a := range meta.Algs {
		if slices.Contains(asymmetric, jose.SignatureAlgorithm(a)) {
			algs = append(algs, a)
		}
	}
	if len(algs) == 0 {
		algs = []string{string(jose.RS256)}
	}
	r.ver = oidc.NewVerifier(r.issuer, &remoteKeys{url: meta.JWKS, algs: algs}, r.v.oidcConfig(algs))
	return r.ver, nil
}

// remoteKeys is an issuer's JWKS, fetched again when a token names a key
// it does not hold (the issuer rotated), at most every refetchEvery:
// go-oidc's own RemoteKeySet fetches on every failed signature, which a
// caller sending forged tokens would turn against the issuer.
type remoteKeys struct {
	url  string
	algs []string

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time
}

const (
	refetchEvery = 2 * time.Second
	keysMaxAge   = 15 * time.Minute
)

func (k *remoteKeys) stale() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.fetched.IsZero() && time.Since(k.fetched) > keysMaxAge
}

func (k *remoteKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	algs := make([]jose.SignatureAlgorithm, len(k.algs))
	for i, a := range k.algs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	jws, err := jose.ParseSigned(raw, algs)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("one signature expected")
	}
	kid := jws.Signatures[0].Header.KeyID
	if k.stale() {
		// A key the issuer withdrew stops being taken within keysMaxAge,
		// however often a token names it.
		k.refetch(ctx)
	}
	key, ok := k.find(kid)
	if !ok {
		if err := k.refetch(ctx); err != nil {
			return nil, err
		}
		if key, ok = k.find(kid); !ok {
			return nil, errors.New("signed by a key the issuer does not publish")
		}
	}
	return jws.Verify(key)
}

// find is the key of kid (or the one key, when the token names none).
func (k *remoteKeys) find(kid string) (jose.JSONWebKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range k.keys {
		if key.KeyID == kid || (kid == "" && len(k.keys) == 1) {
			return key, key.Valid() && key.IsPublic()
		}
	}
	return jose.JSONWebKey{}, false
}

// refetch fetches the JWKS, outside the lock: verifications with the
// keys held go on meanwhile.
func (k *remoteKeys) refetch(ctx context.Context) error {
	k.mu.Lock()
	if time.Since(k.fetched) < refetchEvery {
		k.mu.Unlock()
		return nil
	}
	k.fetched = time.Now()
	k.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, "GET", k.url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the JWKS: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("fetching the JWKS: %s", res.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(http.MaxBytesReader(nil, res.Body, 1<<20)).Decode(&set); err != nil {
		return fmt.Errorf("the JWKS does not parse: %w", err)
	}
	k.mu.Lock()
	k.keys = set.Keys
	k.mu.Unlock()
	return nil
}

// Authenticator is the server's one way from a bearer to a principal: an
// API key through Keys, a JWT through the Verifier.
type Authenticator struct {
	Keys     Subjects
	Verifier *Verifier
}

// Principal resolves token. The principal carries the token for this one
// call (a lease exchanges it for the sandbox's own credential).
func (a *Authenticator) Principal(ctx context.Context, token string) (sandbox.Principal, error) {
	var p sandbox.Principal
	var err error
	if IsJWT(token) {
		if a.Verifier == nil {
			return p, sandbox.Errorf(sandbox.KindUnauthorized, "JWTs are not taken by this server")
		}
		p, err = a.Verifier.Principal(ctx, token)
	} else {
		p, err = a.Keys.Principal(ctx, token)
	}
	if err != nil {
		return sandbox.Principal{}, err
	}
	p.Token = token
	return p, nil
}
