package preview

import (
	"context"
	"errors"
	"github.com/sandboxd/sandbox/wire"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Previews is the access side of port previews: it mints the signed,
// expiring links that stand in for a key in a browser, checks them on
// every request (the sandbox must still be live and the link's org's, so
// ending it revokes every link), and dials a port through the relay.
type Previews struct {
	svc    Sandboxes
	relay  Relay
	signer *Signer
	cfg    Config
	orgs   PublicIndex
	keys   KeyIndex
	// public says the operator allows public previews (the service's
	// --public-previews, which also bounds a lease's publicPorts).
	public bool
	now    func() time.Time
}

// Sandboxes is the service's seam the previews stand on.
type Sandboxes interface {
	// Get is a sandbox of the caller's org.
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// Use opens a piece of work on a running sandbox of the caller's org
	// (waking it, counted against the org's commands; Stop cancels it);
	// done ends it.
	Use(ctx context.Context, id string) (sb *sandbox.Sandbox, work context.Context, done func(), err error)
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

// NewPreviews are the previews of svc's sandboxes, reached through relay,
// links signed by signer; public says the operator allows public previews,
// orgs nil serves none; keys says whether a link's minting key still works
// (nil: every link minted by a key is refused).
func NewPreviews(svc Sandboxes, relay Relay, signer *Signer, cfg Config, public bool, orgs PublicIndex, keys KeyIndex) *Previews {
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	return &Previews{svc: svc, relay: relay, signer: signer, cfg: cfg, public: public, orgs: orgs, keys: keys, now: time.Now}
}

// Public admits a request with no credential to port of sandbox id when
// that port is public: the lease asked, and the operator allows public
// previews now. The request names no org: the public index says whose
// the id is. It answers ctx with the sandbox's org as the principal;
// anything else is the refusal a request with no credential gets (401),
// saying nothing of whether id exists.
func (p *Previews) Public(ctx context.Context, id string, port int) (context.Context, error) {
	refuse := sandbox.Errorf(sandbox.KindUnauthorized, "this preview needs your key (Authorization: Bearer <key>) or a preview link (POST /v1/sandbox/%s/ports/%d/link)", id, port)
	if !p.public || p.orgs == nil || !sandbox.ValidID(id) {
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
func (p *Previews) Config() Config { return p.cfg }

// TokenParam and CookieName carry a preview link's token: in the URL of
// the first visit, then (set by that visit) in a cookie.
const (
	TokenParam = "preview_token"
	CookieName = "sandbox_preview"
)

// PreviewLink is a minted link (wire.PreviewLink).
type PreviewLink = wire.PreviewLink

// Link mints a link to port of sandbox id (the caller's), good for ttlSec
// (0: DefaultLinkTTL) and never past the lease's expiry. A link is
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
		return nil, sandbox.Errorf(sandbox.KindInvalid, "ttlSec %d: give a number of seconds, or 0 for %d", ttlSec, int64(DefaultLinkTTL/time.Second))
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
		return nil, sandbox.Errorf(sandbox.KindConflict, "sandbox %s is %s: a preview link needs it running or sleeping", sb.ID, sb.Status)
	}
	now := pv.now()
	ttl := DefaultLinkTTL
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
	tok := pv.signer.Mint(Claims{Org: org, ID: sb.ID, Port: port, Expires: exp, Key: p.Key})
	o, _ := OriginFrom(ctx)
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	_, serverPort, _ := net.SplitHostPort(o.Host)
	link := &PreviewLink{
		ID: sb.ID, Port: port, ExpiresAt: exp.Unix(),
		URL:     o.Scheme + "://" + Host(port, sb.ID, pv.cfg.Domain, serverPort) + "/?" + TokenParam + "=" + url.QueryEscape(tok),
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
	c, err := p.signer.Verify(token, id, port, p.now())
	switch {
	case errors.Is(err, ErrExpired):
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
