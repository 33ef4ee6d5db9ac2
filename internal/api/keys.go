package api

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

type keysBody struct {
	Keys []store.Key `json:"keys"`
}

// listKeys answers an org's keys: ids, subjects, creation, last use and
// expiry — never a secret.
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
	TTLSec int64 `json:"ttlSec,omitempty"`
}

type mintedKey struct {
	// Secret is the key itself, shown this once.
	Secret string `json:"secret"`
	store.Key
}

func (s *Server) mintKey(w http.ResponseWriter, r *http.Request) error {
	var req mintKeyRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	if req.TTLSec < 0 || req.TTLSec > 10*365*86400 {
		return sandbox.Errorf(sandbox.KindInvalid, "ttlSec must be 0 (no expiry) to ten years")
	}
	if req.Subject == "" {
		req.Subject = "operator"
	}
	var exp time.Time
	if req.TTLSec > 0 {
		exp = time.Now().Add(time.Duration(req.TTLSec) * time.Second)
	}
	secret, k, err := s.Operator.MintKey(r.Context(), r.PathValue("org"), req.Subject, store.ScopeTenant, exp)
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
