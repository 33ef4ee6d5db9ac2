package api

import (
	"net/http"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

type quotaBody struct {
	Quotas []quota.Line `json:"quotas"`
}

// quotaLines answers each quota of the caller's org with its use.
func (s *Server) quotaLines(w http.ResponseWriter, r *http.Request) error {
	lines, err := s.Quotas.QuotaLines(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, quotaBody{Quotas: lines})
	return nil
}

type volumesBody struct {
	Volumes []wire.Volume `json:"volumes"`
}

func (s *Server) volumes(w http.ResponseWriter, r *http.Request) error {
	v, err := s.Volumes.List(r.Context())
	if err != nil {
		return err
	}
	b := volumesBody{Volumes: make([]wire.Volume, len(v))}
	for i, p := range v {
		b.Volumes[i] = wire.Volume{Project: p.Name, SizeMiB: p.SizeMiB, CreatedAt: p.CreatedAt, LastUsedAt: p.LastUsedAt, LiveSandbox: p.LiveSandbox}
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Volumes.Delete(r.Context(), r.PathValue("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// operator gates a route to the operator org's admin keys: any other
// caller, the operator org's tenant keys included, is a 403.
func (s *Server) operator(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, _ := sandbox.PrincipalFrom(r.Context())
		if err := s.operatorOnly(p, "this route is"); err != nil {
			return err
		}
		return h(w, r)
	}
}

// operatorOnly is nil for an admin key of the operator org, else a 403
// saying which of the two the caller lacks; what names the route.
func (s *Server) operatorOnly(p sandbox.Principal, what string) error {
	switch {
	case p.Org != s.opts.OperatorOrg:
		return sandbox.Errorf(sandbox.KindForbidden, "%s for the operator org", what)
	case !admin(p):
		return sandbox.Errorf(sandbox.KindForbidden, "%s for the operator org's admin-scoped keys: this one is not (sandbox keys create --scope admin)", what)
	}
	return nil
}

// admin reports whether p holds an admin-scoped key. A confined caller (a
// lease's credential) never does, whatever else it says.
func admin(p sandbox.Principal) bool { return p.Admin && !p.Confined() }

type orgQuotaBody = wire.OrgQuota

func (s *Server) orgQuotaBody(r *http.Request, org string) (orgQuotaBody, error) {
	o, err := s.Operator.OrgQuota(r.Context(), org)
	if err != nil {
		return orgQuotaBody{}, err
	}
	// The effective policy is what the org's own calls see.
	octx := sandbox.WithPrincipal(r.Context(), sandbox.Principal{Org: org, Subject: "operator"})
	eff, err := s.Quotas.Policy(octx)
	if err != nil {
		return orgQuotaBody{}, err
	}
	return orgQuotaBody{Org: org, Override: wire.Policy(o), Effective: wire.Policy(eff)}, nil
}

func (s *Server) orgQuota(w http.ResponseWriter, r *http.Request) error {
	b, err := s.orgQuotaBody(r, r.PathValue("org"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// setOrgQuota replaces the org's override with the body (an empty object
// clears it): PUT semantics, so a field left out takes the server's value.
func (s *Server) setOrgQuota(w http.ResponseWriter, r *http.Request) error {
	org := r.PathValue("org")
	if org == "" || len(org) > 256 {
		return sandbox.Errorf(sandbox.KindInvalid, "name an org")
	}
	var p quota.Policy
	if err := decode(r.Body, &p); err != nil {
		return err
	}
	if err := s.Operator.SetOrgQuota(r.Context(), org, p); err != nil {
		return err
	}
	b, err := s.orgQuotaBody(r, org)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}
