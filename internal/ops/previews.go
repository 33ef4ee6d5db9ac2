package ops

import (
	"context"

	"github.com/sandboxd/sandbox/internal/preview"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Previews mints preview links (preview_link).
type Previews interface {
	Link(ctx context.Context, id string, port int, ttlSec int64) (*preview.PreviewLink, error)
}

var _ Previews = (*preview.Previews)(nil)

// WithPreviews gives o the preview_link op; without it the op answers
// that this server serves no previews. Call it before o serves.
func (o *Ops) WithPreviews(p Previews) *Ops {
	o.links = p
	return o
}

// PreviewLinkIn asks for a link to a port of a sandbox.
type PreviewLinkIn struct {
	ID     string `json:"id" jsonschema:"the sandbox"`
	Port   int    `json:"port" jsonschema:"the port a server listens on inside the sandbox (its own loopback)"`
	TTLSec int64  `json:"ttlSec,omitempty" jsonschema:"how long the link works, in seconds (default 3600; never past the lease's expiry)"`
}

// PreviewLink mints a signed, expiring link that opens port of the
// sandbox in a browser with no key: the host form's URL (the app at /, on
// its own origin), and the path form's without the token (for requests
// with a key). Whoever holds it opens that port until it expires, the
// sandbox ends, or the key that minted it is revoked.
func (o *Ops) PreviewLink(ctx context.Context, in PreviewLinkIn) (*preview.PreviewLink, error) {
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	if o.links == nil {
		return nil, sandbox.Errorf(sandbox.KindUnsupported, "this server serves no port previews")
	}
	return o.links.Link(ctx, in.ID, in.Port, in.TTLSec)
}
