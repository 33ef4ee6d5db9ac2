package preview

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// Config is the operator's settings of port previews.
type Config struct {
	// Domain is the preview domain: a request whose Host is
	// "{port}-sb-{…}.{Domain}" (Label) (with any server port) is a preview of that
	// port of that sandbox, served before the API routes. Empty means
	// DefaultDomain. For previews from other machines, point a wildcard
	// DNS name (*.previews-example.com) at the server and give
	// previews-example.com: a registrable domain of its own, never one
	// under the API's (a page's script can set a cookie for a parent
	// domain, which the server cannot strip).
	Domain string
}

// DefaultLinkTTL is a preview link's life when the caller names none
// (never past the lease's expiry).
const DefaultLinkTTL = time.Hour

// RegisterFlags defines the preview flags on fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Domain, "preview-domain", DefaultDomain, "port previews by host: a request for {port}-sb-{…}.DOMAIN, the sandbox id with - for its _ (e.g. http://8000-sb-….localhost:8080/), reaches that port inside that sandbox, "+
		"so apps that assume they are served at / work. The default, localhost, needs no DNS: browsers resolve *.localhost to this machine. "+
		"For other machines, point a wildcard DNS name (*.previews-example.com) at the server and pass previews-example.com, a registrable domain of its own, not one under the API's (ideally on the Public Suffix List), so that no preview's cookie reaches the API or another preview. "+
		"Browsers are served previews here only; the path form /v1/sandbox/{id}/ports/{port}/ serves API clients with a key, and sends a browser here")
}

// Validate refuses a domain that cannot be a host name's suffix.
func (c Config) Validate() error {
	if c.Domain != "" && !ValidDomain(c.Domain) {
		return fmt.Errorf("--preview-domain %q: give a DNS name such as localhost or preview.example.com (no scheme, port or *)", c.Domain)
	}
	return nil
}

// DomainOrDefault is Domain with its default.
func (c Config) DomainOrDefault() string {
	if c.Domain == "" {
		return DefaultDomain
	}
	return c.Domain
}

// Origin is how a caller reached the server: the scheme and the Host it
// used. Links are made from it, so a link works from where its minter
// stands (the server knows no public URL of its own).
type Origin struct {
	Scheme string // "http" or "https"
	Host   string // host[:port] as the request named it
}

type originKey struct{}

// WithOrigin is ctx carrying o.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// OriginFrom is the origin in ctx, if any.
func OriginFrom(ctx context.Context) (Origin, bool) {
	o, ok := ctx.Value(originKey{}).(Origin)
	return o, ok
}
