package service

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Previews is the access side of port previews: it mints the signed,
// expiring links that stand in for a key in a browser, checks them on
// every request (the sandbox must still be live and the link's org's, so
// ending it revokes every link), and dials through the Service.
type Previews struct {
	svc    *Service
	signer *preview.Signer
	cfg    preview.Config
	orgs   PublicIndex
	keys   KeyIndex
}

// KeyIndex answers whether the API key of a public id still works (not
// revoked, not expired): a preview link is only as alive as the key that
// minted it.
type KeyIndex interface {
	KeyActive(ctx context.Context, id string) (bool, error)
}

// PublicIndex finds the org of a sandbox whose lease asked for public
// ports ("" when none did): a public preview's request names no org.
type PublicIndex interface {
	PublicOrg(ctx context.Context, id string) (string, error)
}

// NewPreviews are the previews of svc's sandboxes, links signed by signer;
// orgs nil serves no public previews; keys says whether a link's minting
// key still works (nil: every link minted by a key is refused).
func NewPreviews(svc *Service, signer *preview.Signer, cfg preview.Config, orgs PublicIndex, keys KeyIndex) *Previews {
	if cfg.Domain == "" {
		cfg.Domain = preview.DefaultDomain
	}
	return &Previews{svc: svc, signer: signer, cfg: cfg, orgs: orgs, keys: keys}
}

// maxPublicPorts bounds a lease's public ports.
const maxPublicPorts = 16

// publicPorts checks a lease's public ports: allowed by the operator,
// each a port, at most maxPublicPorts; answered sorted without repeats.
func (s *Service) publicPorts(ports []int) ([]int, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	if !s.cfg.PublicPreviews {
		return nil, sandbox.Errorf(sandbox.KindForbidden, "this server does not allow public previews (publicPorts): open a port with your key or a preview link (POST /v1/sandbox/{id}/ports/{port}/link), or ask the operator for --public-previews")
	}
	if len(ports) > maxPublicPorts {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "publicPorts: at most %d ports", maxPublicPorts)
	}
	out := slices.Clone(ports)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, p := range out {
		if p < 1 || p > 65535 {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "publicPorts: %d is not a port (1-65535)", p)
		}
	}
	return out, nil
}

// Public admits a request with no credential to port of sandbox id when
// that port is public: the lease asked, and the operator allows public
// previews now. The request names no org: the public index says whose
// the id is. It answers ctx with the sandbox's org as the principal;
// anything else is the refusal a request with no credential gets (401),
// saying nothing of whether id exists.
func (p *Previews) Public(ctx context.Context, id string, port int) (context.Context, error) {
	refuse := sandbox.Errorf(sandbox.KindUnauthorized, "this preview needs your key (Authorization: Bearer <key>) or a preview link (POST /v1/sandbox/%s/ports/%d/link)", id, port)
	if !p.svc.cfg.PublicPreviews || p.orgs == nil || !sandbox.ValidID(id) {
		return nil, refuse
	}
	// One indexed lookup, never a search of every org's store: the
	// request carries no credential, so it must not cost more than a
	// refused one.
	org, err := p.orgs.PublicOrg(ctx, id)
	if err != nil {
		return nil, err
	}
	if org == "" {
		return nil, refuse
	}
	octx := sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "public preview"})
	sb, err := p.svc.Get(octx, id)
	if sandbox.KindOf(err) == sandbox.KindNotFound {
		return nil, refuse
	}
	if err != nil {
		return nil, err
	}
	if !slices.Contains(sb.PublicPorts, port) {
		return nil, refuse
	}
	return octx, nil
}

// Config is the operator's preview settings, defaults applied.
func (p *Previews) Config() preview.Config { return p.cfg }

// DialPort is Service.DialPort.
func (p *Previews) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return p.svc.DialPort(ctx, id, port)
}

// TokenParam and CookieName carry a preview link's token: in the URL of
// the first visit, then (set by that visit) in a cookie.
const (
	TokenParam = "preview_token"
	CookieName = "sandbox_preview"
)

// PreviewLink is a minted link: the host form's URL with the token, for a
// browser, the path form's URL (no token) for API clients with a key, and
// when the link stops working.
type PreviewLink struct {
	ID   string `json:"id"`
	Port int    `json:"port"`
	// URL is the host form, http://{port}-{id}.{preview-domain}[:port]/,
	// which serves the app at / (what most apps assume), on an origin of
	// its own: the only form a browser is served.
	URL string `json:"url" jsonschema:"the host form, {port}-{id}.{preview-domain}: the app at /, on an origin of its own; open it in a browser (the first visit sets a cookie and drops the token from the URL)"`
	// PathURL is the path form, under the API's own host. It carries no
	// token: the path form serves API clients with a key only, and sends
	// a browser to the host form.
	PathURL   string `json:"pathUrl" jsonschema:"the path form, /v1/sandbox/{id}/ports/{port}/ on the API's host, without the token: for API clients with a key (Authorization); a browser opening it is sent to the host form"`
	ExpiresAt int64  `json:"expiresAt" jsonschema:"Unix seconds; never past the lease's expiry nor the minting credential's (a token's exp). Ending the sandbox, or revoking the API key that minted it, revokes the link at once"`
}

// Link mints a link to port of sandbox id (the caller's), good for ttlSec
// (0: preview.DefaultLinkTTL) and never past the lease's expiry. A link is
// a bearer credential for that one port: whoever holds it opens the
// preview until it expires or the sandbox ends — and no longer than the
// credential that minted it: an API key's id is signed into the link and
// asked on every request (revoking or expiring the key kills the link);
// a principal that is not a key (an OIDC token, which the server cannot
// revoke, only see expire) caps the link's expiry at its own.
func (pv *Previews) Link(ctx context.Context, id string, port int, ttlSec int64) (*PreviewLink, error) {
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "port %d: a port is 1-65535", port)
	}
	if ttlSec < 0 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "ttlSec %d: give a number of seconds, or 0 for %d", ttlSec, int64(preview.DefaultLinkTTL/time.Second))
	}
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := pv.svc.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Status != sandbox.StatusRunning && sb.Status != sandbox.StatusSleeping {
		return nil, notRunning(sb)
	}
	now := pv.svc.now()
	ttl := preview.DefaultLinkTTL
	if ttlSec > 0 {
		ttl = time.Duration(min(ttlSec, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	p, _ := sandbox.PrincipalFrom(ctx)
	exp := now.Add(ttl)
	if exp.After(sb.ExpiresAt) {
		exp = sb.ExpiresAt
	}
	if !p.Expires.IsZero() && exp.After(p.Expires) {
		exp = p.Expires
	}
	exp = exp.Truncate(time.Second)
	if !exp.After(now) {
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox %s's lease (or your credential) ends now; renew it first", sb.ID)
	}
	tok := pv.signer.Mint(preview.Claims{Org: org, ID: sb.ID, Port: port, Expires: exp, Key: p.Key})
	o, _ := preview.OriginFrom(ctx)
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	_, serverPort, _ := net.SplitHostPort(o.Host)
	link := &PreviewLink{
		ID: sb.ID, Port: port, ExpiresAt: exp.Unix(),
		URL:     o.Scheme + "://" + preview.Host(port, sb.ID, pv.cfg.Domain, serverPort) + "/?" + TokenParam + "=" + url.QueryEscape(tok),
		PathURL: "/v1/sandbox/" + sb.ID + "/ports/" + strconv.Itoa(port) + "/",
	}
	if o.Host != "" {
		link.PathURL = o.Scheme + "://" + o.Host + link.PathURL
	}
	return link, nil
}

// Access checks a link's token for port of sandbox id: made by this
// server, not expired, for this sandbox and port, the API key that minted
// it still working, and the sandbox still the token's org's and not
// ended. It answers ctx with the token's org as the principal (the
// preview runs as that org) and the token's expiry. A bad token, or one
// whose key is revoked or expired, is KindUnauthorized; a sandbox gone
// since is KindNotFound.
func (p *Previews) Access(ctx context.Context, token, id string, port int) (context.Context, time.Time, error) {
	c, err := p.signer.Verify(token, id, port, p.svc.now())
	switch {
	case errors.Is(err, preview.ErrExpired):
		return nil, time.Time{}, sandbox.Wrap(sandbox.KindUnauthorized, err, "this preview link has expired: mint a new one (POST /v1/sandbox/"+id+"/ports/"+strconv.Itoa(port)+"/link)")
	case err != nil:
		return nil, time.Time{}, sandbox.Wrap(sandbox.KindUnauthorized, err, "this preview link is not valid here: it was altered, or is for another sandbox or port")
	}
	if c.Key != "" {
		// Asked on every request, cookie or token alike (one indexed
		// read of the control database): the link dies the moment its
		// key does, by the server or by the CLI on the data directory.
		live := false
		if p.keys != nil {
			if live, err = p.keys.KeyActive(ctx, c.Key); err != nil {
				return nil, time.Time{}, err
			}
		}
		if !live {
			return nil, time.Time{}, sandbox.Errorf(sandbox.KindUnauthorized, "the API key that minted this preview link was revoked or has expired: mint a new link with a working key")
		}
	}
	ctx = sandbox.WithPrincipal(ctx, sandbox.Principal{Org: c.Org, Subject: "preview link", Key: c.Key})
	if _, err := p.svc.Get(ctx, id); err != nil {
		return nil, time.Time{}, err
	}
	return ctx, c.Expires, nil
}
