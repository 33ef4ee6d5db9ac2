package api

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/wire"
)

// keyAdmin gates the key routes of /v1/orgs/{org}: the operator org's
// admin keys manage every org's keys, and an org's own admin keys its own
// (self-service, without the operator); never another org's. Quotas stay
// the operator's (see operator).
func (s *Server) keyAdmin(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, _ := sandbox.PrincipalFrom(r.Context())
		switch {
		case p.Org != s.opts.OperatorOrg && p.Org != r.PathValue("org"):
			return sandbox.Errorf(sandbox.KindForbidden, "this route is for the operator org or the org's own admin key")
		case !admin(p):
			return sandbox.Errorf(sandbox.KindForbidden, "this route needs an admin-scoped key (of the operator org, or of the org itself): this one is not (sandbox keys create --scope admin)")
		}
		return h(w, r)
	}
}

type keysBody struct {
	Keys []store.Key `json:"keys"`
}

// listKeys answers an org's keys: ids, subjects, scopes, creation, last
// use and expiry — never a secret.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := s.Operator.Keys(r.Context(), r.PathValue("org"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, keysBody{Keys: keys})
	return nil
}

type mintKeyRequest struct {
	Subject string `json:"subject,omitempty"`
	// TTLSec makes the key expire this long from now; 0 never.
	TTLSec int64  `json:"ttlSec,omitempty"`
	Scope  string `json:"scope,omitempty" jsonschema:"tenant (the default: the org's sandboxes) or admin (also the org's keys)"`
}

type mintedKey = wire.MintedKey

func (s *Server) mintKey(w http.ResponseWriter, r *http.Request) error {
	var req mintKeyRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	if req.TTLSec < 0 || req.TTLSec > 10*365*86400 {
		return sandbox.Errorf(sandbox.KindInvalid, "ttlSec must be 0 (no expiry) to ten years")
	}
	if req.Scope == "" {
		req.Scope = store.ScopeTenant
	}
	if err := store.CheckScope(req.Scope); err != nil {
		return err
	}
	// A key never has more than its minter. The gate lets in only admin
	// keys, the operator's or the org's own, so an admin key minted here
	// is of the minter's own org or minted by the operator; this says so
	// where the key is made, not only in the route's gate.
	org := r.PathValue("org")
	p, _ := sandbox.PrincipalFrom(r.Context())
	if req.Scope == store.ScopeAdmin && !(admin(p) && (p.Org == org || p.Org == s.opts.OperatorOrg)) {
		return sandbox.Errorf(sandbox.KindForbidden, "an admin key is minted by an admin key of its org or of the operator org")
	}
	if req.Subject == "" {
		req.Subject = "operator"
		if p.Org != s.opts.OperatorOrg {
			req.Subject = "org admin" // the org's own admin minted it
		}
	}
	var exp time.Time
	if req.TTLSec > 0 {
		exp = time.Now().Add(time.Duration(req.TTLSec) * time.Second)
	}
	secret, k, err := s.Operator.MintKey(r.Context(), org, req.Subject, req.Scope, exp)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, mintedKey{Secret: secret, Key: k})
	return nil
}

type revokedBody struct {
	ID      string `json:"id"`
	Revoked bool   `json:"revoked"`
}

// revokeKey deletes a key: its next request is a 401, and its open
// terminals, screens, event streams and MCP streams end within seconds.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("key")
	if err := s.Operator.RevokeKey(r.Context(), r.PathValue("org"), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, revokedBody{ID: id, Revoked: true})
	return nil
}
