package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Principal is who calls: the org comes only from here, never from a body or
// a query parameter.
type Principal struct {
	Org     string
	Subject string
	// Key is the public id of the API key the caller presented (empty for
	// the server's own work): long connections end when it is revoked.
	Key string
}

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
