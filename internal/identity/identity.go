// Package identity is who a caller is beyond an API key, and the one
// credential a lease is handed.
//
// Three parts:
//
//   - Verifier: a bearer that is a JWT of a trusted issuer (--oidc-issuer,
//     discovery and JWKS through github.com/coreos/go-oidc, keys rotated at
//     the issuer picked up) is a principal whose org is a claim of it. The
//     JOSE is go-jose's; nothing here parses a signature by hand.
//   - Issuer: the server is an OAuth 2.0 authorization server for its own
//     tokens. It keeps RSA keys in the data directory, rotates them,
//     publishes discovery and JWKS, and answers RFC 8693 token exchange at
//     its token endpoint.
//   - The lease credential (see Exchanger): a token naming the org and one
//     sandbox, expiring with the lease, obtained by token exchange for the
//     caller's credential by the dedicated "sandbox" client, and never for
//     the reserved operator org. The service writes it into the sandbox
//     over the exec channel; nothing of it enters a spec or an environment.
package identity

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is the identity settings, as an operator sets them.
type Config struct {
	// Issuers are the external OIDC issuers whose JWTs are principals.
	Issuers []string
	// Audience is the aud a JWT must carry to be taken here (the
	// external issuers' and this server's own); empty means "sandbox".
	Audience string
	// OrgClaim is the claim naming the org; empty means "org".
	OrgClaim string
	// Leeway is the clock skew allowed on exp and nbf; zero means
	// DefaultLeeway, and it is at most MaxLeeway.
	Leeway time.Duration

	// URL is this server's issuer URL (its tokens' iss, the base of its
	// discovery). Empty: the binary sets it from --listen.
	URL string
	// Rotation is how old the signing key gets before a new one signs;
	// zero means DefaultRotation.
	Rotation time.Duration
	// ExchangeURL, when set, is an external RFC 8693 token endpoint that
	// performs the lease credential's exchange instead of this server.
	ExchangeURL string
	// ClientSecretFile holds the "sandbox" client's secret at this
	// server's own issuer; empty means DATA/identity/sandbox-client.secret,
	// made on the first start.
	ClientSecretFile string
	// ExchangeSecretFile holds the "sandbox" client's secret at the
	// external ExchangeURL: another secret than this issuer's, so that
	// whoever runs that endpoint cannot act as this server's client here.
	ExchangeSecretFile string
	// NoCredential turns the lease credential off.
	NoCredential bool
	// CredentialTTL, when set, caps how long one credential this issuer
	// mints lives (it is refreshed before it expires, while the lease
	// lives); zero: it lives until the lease's end.
	CredentialTTL time.Duration
}

// Defaults and bounds of the Config fields.
const (
	DefaultAudience = "sandbox"
	DefaultOrgClaim = "org"
	DefaultLeeway   = 30 * time.Second
	MaxLeeway       = 5 * time.Minute
	DefaultRotation = 30 * 24 * time.Hour
	// ClientID is the dedicated client the lease credential is exchanged
	// by.
	ClientID = "sandbox"
)

// RegisterFlags defines the identity flags on fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("oidc-issuer", "an OIDC issuer URL whose JWTs are callers (discovery and JWKS fetched from it; repeatable)", func(v string) error {
		c.Issuers = append(c.Issuers, v)
		return nil
	})
	fs.StringVar(&c.Audience, "oidc-audience", DefaultAudience, "the audience (aud) a JWT must name to be accepted")
	fs.StringVar(&c.OrgClaim, "oidc-org-claim", DefaultOrgClaim, "the JWT claim that names the caller's org (a token without it is refused)")
	fs.DurationVar(&c.Leeway, "oidc-leeway", DefaultLeeway, "clock skew allowed on a JWT's exp and nbf (at most 5m)")
	fs.StringVar(&c.URL, "issuer-url", "", "this server's URL as its tokens' issuer (default http://LISTEN)")
	fs.DurationVar(&c.Rotation, "issuer-key-rotation", DefaultRotation, "age at which the issuer's signing key is replaced (the old one stays published while its tokens live)")
	fs.StringVar(&c.ExchangeURL, "token-exchange-url", "", "an external RFC 8693 token endpoint that exchanges the lease credential instead of this server's own issuer")
	fs.StringVar(&c.ClientSecretFile, "sandbox-client-secret-file", "", "the secret of the \"sandbox\" client at this server's own token endpoint (default DATA/identity/sandbox-client.secret, made on the first start)")
	fs.StringVar(&c.ExchangeSecretFile, "token-exchange-secret-file", "", "the \"sandbox\" client's secret at --token-exchange-url (required with it; never this server's own)")
	fs.BoolVar(&c.NoCredential, "no-lease-credential", false, "hand leases no credential (/run/sandbox/token)")
	fs.DurationVar(&c.CredentialTTL, "lease-credential-ttl", 0, "the longest one lease credential lives; it is refreshed before it expires while the lease lives (0: until the lease's end)")
}

// Validate refuses settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	for _, iss := range c.Issuers {
		if err := checkURL(iss); err != nil {
			errs = append(errs, fmt.Errorf("--oidc-issuer %q: %w", iss, err))
		}
	}
	if c.URL != "" {
		// This server's own name: http is the operator's choice (behind a
		// proxy that terminates TLS, say).
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("--issuer-url %q: give an absolute http(s) URL with no query", c.URL))
		}
	}
	if c.ExchangeURL != "" {
		if err := checkURL(c.ExchangeURL); err != nil {
			errs = append(errs, fmt.Errorf("--token-exchange-url %q: %w", c.ExchangeURL, err))
		}
		if c.ExchangeSecretFile == "" {
			errs = append(errs, errors.New("--token-exchange-url needs --token-exchange-secret-file (the sandbox client's secret there)"))
		}
	}
	if c.Leeway < 0 || c.Leeway > MaxLeeway {
		errs = append(errs, fmt.Errorf("--oidc-leeway %v: give 0 to %v", c.Leeway, MaxLeeway))
	}
	if c.CredentialTTL < 0 || (c.CredentialTTL > 0 && c.CredentialTTL < 2*time.Second) {
		errs = append(errs, fmt.Errorf("--lease-credential-ttl %v: give 0 or at least 2s", c.CredentialTTL))
	}
	if c.Rotation < 0 || (c.Rotation > 0 && c.Rotation < time.Second) {
		errs = append(errs, fmt.Errorf("--issuer-key-rotation %v: give at least 1s", c.Rotation))
	}
	if strings.TrimSpace(c.OrgClaim) == "" && c.OrgClaim != "" {
		errs = append(errs, errors.New("--oidc-org-claim must name a claim"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Audience == "" {
		c.Audience = DefaultAudience
	}
	if c.OrgClaim == "" {
		c.OrgClaim = DefaultOrgClaim
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.Rotation == 0 {
		c.Rotation = DefaultRotation
	}
	c.URL = strings.TrimSuffix(c.URL, "/")
	return c
}

// checkURL accepts an absolute https URL with a host and no query, or
// http to this machine's loopback: keys fetched, or secrets sent, in the
// clear across a network would let anyone on the path forge callers.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("give an absolute https URL with no query")
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return errors.New("plain http is taken for a loopback address only; use https")
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
