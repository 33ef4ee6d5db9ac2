package server

import (
	"context"
	"log/slog"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/credential"
	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// wiredIdentity is the identity parts as configured: the server's own
// issuer (when it knows its URL), the exchanger of lease credentials (the
// issuer, or an external token endpoint), and the trusted issuers.
type wiredIdentity struct {
	cfg       identity.Config
	issuer    *identity.Issuer
	exchanger credential.Exchanger
	// verify is the authenticator as the service checks a credential it
	// was handed: the service is built first (the verifier asks it
	// whether a lease lives), so it is filled in by authenticator.
	verify lateVerify
}

// lateVerify is an authenticator set after its holder is built.
type lateVerify struct{ a *identity.Authenticator }

func (l *lateVerify) Principal(ctx context.Context, token string) (sandbox.Principal, error) {
	if l.a == nil {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnavailable, "the server is starting")
	}
	return l.a.Principal(ctx, token)
}

func operatorOrg(cfg Config) string {
	if cfg.API.OperatorOrg == "" {
		return api.DefaultOperatorOrg
	}
	return cfg.API.OperatorOrg
}

func newIdentity(cfg Config, log *slog.Logger) (*wiredIdentity, error) {
	w := &wiredIdentity{cfg: cfg.Identity}
	if cfg.Identity.URL != "" {
		is, err := identity.NewIssuer(cfg.Identity, cfg.Data, operatorOrg(cfg), log)
		if err != nil {
			return nil, err
		}
		w.issuer = is
	}
	switch {
	case cfg.Identity.NoCredential:
	case cfg.Identity.ExchangeURL != "":
		secret, err := identity.ReadSecret(cfg.Identity.ExchangeSecretFile)
		if err != nil {
			return nil, err
		}
		aud := cfg.Identity.Audience
		if aud == "" {
			aud = identity.DefaultAudience
		}
		w.exchanger = &identity.RemoteExchanger{URL: cfg.Identity.ExchangeURL, Secret: secret, Audience: aud}
	case w.issuer != nil:
		w.exchanger = w.issuer
	}
	return w, nil
}

// authenticator is the one bearer check of every door: API keys through
// the store, JWTs of the trusted issuers (and the server's own) through
// the verifier; a lease credential is revoked with its lease (its row in
// the store).
func (w *wiredIdentity) authenticator(st *store.Store, log *slog.Logger) *identity.Authenticator {
	a := &identity.Authenticator{Keys: st}
	leases := identity.RowLeases{Rows: st}
	if w.issuer != nil || len(w.cfg.Issuers) > 0 {
		a.Verifier = identity.NewVerifier(w.cfg, w.issuer, leases, log)
	}
	if w.issuer != nil {
		w.issuer.Subjects, w.issuer.Leases = a, leases
	}
	w.verify.a = a
	return a
}

// issuerRoutes is the issuer as the API serves it (a nil interface when
// there is none).
func (w *wiredIdentity) issuerRoutes() api.Issuer {
	if w.issuer == nil {
		return nil
	}
	return w.issuer
}

// mcpAuth is the MCP door's authenticator: the same bearer check, and the
// store's word on whether a key still works.
type mcpAuth struct {
	*identity.Authenticator
	keys keywatch.Checker
}

func (m mcpAuth) KeyActive(ctx context.Context, id string) (bool, error) {
	return m.keys.KeyActive(ctx, id)
}
