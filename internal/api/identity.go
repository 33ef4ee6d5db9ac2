package api

import (
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Issuer is the server's own authorization server: discovery, keys and
// the RFC 8693 token endpoint, all public (the token endpoint
// authenticates its client itself).
type Issuer interface {
	ServeDiscovery(w http.ResponseWriter, r *http.Request)
	ServeJWKS(w http.ResponseWriter, r *http.Request)
	ServeToken(w http.ResponseWriter, r *http.Request)
}

// Narrator appends to the org's session logs.
type Narrator interface {
	Append(org, session, kind string, data []byte)
}

var _ Issuer = (*identity.Issuer)(nil)

func (s *Server) issuerRoutes() {
	s.public("GET "+identity.PathDiscovery, s.Issuer.ServeDiscovery, doc{Summary: "OpenID discovery of the server's own issuer (lease credentials): its JWKS and token endpoint", AnswerRaw: "application/json"})
	s.public("GET "+identity.PathMetadata, s.Issuer.ServeDiscovery, doc{Summary: "The same document as OAuth 2.0 authorization server metadata (RFC 8414)", AnswerRaw: "application/json"})
	s.public("GET "+identity.PathJWKS, s.Issuer.ServeJWKS, doc{Summary: "The issuer's public keys (JWKS); a rotated key stays listed while tokens it signed live", AnswerRaw: "application/json"})
	s.public("POST "+identity.PathToken, s.Issuer.ServeToken, doc{Summary: "RFC 8693 token exchange (a form). Client \"sandbox\": with its secret it exchanges a caller's token for a sandbox's credential; with none, a sandbox's credential for a narrower one (fewer scopes, never longer). No refresh token is ever issued, and nothing is minted for the operator org",
		BodyRaw: "application/x-www-form-urlencoded", AnswerRaw: "application/json", Errors: []int{400, 401, 429}})
}

// confine refuses what a sandbox's credential may not do: a route that
// takes none (no scope), a scope it lacks, and any sandbox but its own
// (404, as an unknown id: another sandbox's existence is not its to know).
func confine(p sandbox.Principal, scope string, r *http.Request) error {
	if !p.Confined() {
		return nil
	}
	if scope == "" {
		return sandbox.Errorf(sandbox.KindForbidden, "a sandbox's credential may read its own lease, renew it and narrate; not this")
	}
	if !slices.Contains(p.Scopes, scope) {
		return sandbox.Errorf(sandbox.KindForbidden, "this credential lacks the %s scope", scope)
	}
	if id := r.PathValue("id"); id != "" && id != p.Sandbox {
		return sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	return nil
}

type narrateRequest struct {
	// Text is appended as one event of kind "note" (at most 16 KiB of
	// UTF-8).
	Text string `json:"text"`
}

type narratedBody struct {
	Session string `json:"session"`
	Bytes   int    `json:"bytes"`
}

// narrate appends a note to a session's log: an agent (or the code in a
// sandbox, with its credential) tells the session's followers what it
// does.
func (s *Server) narrate(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := sandbox.CheckSessionName("session", name); err != nil {
		return err
	}
	if s.Narrator == nil {
		return sandbox.Errorf(sandbox.KindNotFound, "session logs are not kept by this server")
	}
	var req narrateRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	if req.Text == "" || len(req.Text) > 16<<10 || !utf8.ValidString(req.Text) {
		return sandbox.Errorf(sandbox.KindInvalid, "text must be 1 byte to 16 KiB of UTF-8")
	}
	org, err := sandbox.OrgRequired(r.Context())
	if err != nil {
		return err
	}
	s.Narrator.Append(org, name, "note", []byte(req.Text))
	writeJSON(w, http.StatusAccepted, narratedBody{Session: name, Bytes: len(req.Text)})
	return nil
}
