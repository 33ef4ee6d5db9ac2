package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// Principal is who calls: the org comes only from here, never from a body or
// a query parameter.
type Principal struct {
	Org     string
	Subject string
	// Key is the public id of the API key the caller presented (empty for
	// the server's own work): long connections end when it is revoked.
	Key string
	// Admin is an API key with the admin scope: it may manage keys and
	// quotas (the operator routes, with the operator org). A tenant-scoped
	// key, a JWT and a lease credential are never admin.
	Admin bool
	// Sandbox, when set, confines the caller to that one sandbox of Org:
	// the credential a lease is handed. Scopes say what it may do there.
	Sandbox string
	Scopes  []string
	// Expires is when the credential stops working (zero: an API key
	// without expiry); an exchange from it never outlives it.
	Expires time.Time
	// Token is the bearer the principal was proven by, kept in memory
	// only for the one call (a lease exchanges it for the sandbox's own
	// credential): never logged, stored or answered.
	Token string `json:"-"`
}

// Confined reports whether p may act only on one sandbox.
func (p Principal) Confined() bool { return p.Sandbox != "" }

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal in ctx, if any.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok && p.Org != ""
}

// OrgRequired returns the org of the principal in ctx, or KindUnauthorized.
// Every store call starts with it, so a code path that forgot to
// authenticate fails closed.
func OrgRequired(ctx context.Context) (string, error) {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return "", Errorf(KindUnauthorized, "no principal")
	}
	return p.Org, nil
}

// Slug returns a filesystem- and label-safe name for raw that never collides
// with another raw name: a readable slug plus a hash of the raw bytes, so two
// orgs that slug alike ("Acme" and "acme") still get different files.
func Slug(raw string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(raw) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 32 {
			break
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == "" {
		s = "x"
	}
	sum := sha256.Sum256([]byte(raw))
	return s + "-" + hex.EncodeToString(sum[:])[:10]
}
