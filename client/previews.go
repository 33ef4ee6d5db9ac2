package client

import (
	"context"
	"strconv"

	"github.com/sandboxd/sandbox/wire"
)

// PreviewLink is a signed, expiring link to a port preview: URL is the
// host form with the link's token (http://{port}-sb-{…}.{preview-domain}/, the id with "-" for its "_",
// the app at /, on an origin of its own): open it in a browser; the first
// visit sets a cookie and drops the token from the address. PathURL is the
// path form (/v1/sandbox/{id}/ports/{port}/ on the API's host) without a
// token, for requests with your key; a browser there is sent to the host
// form. The link works until ExpiresAt (Unix seconds), until the sandbox
// ends, or until the API key that minted it is revoked or expires;
// whoever holds it opens that port.
type PreviewLink = wire.PreviewLink

// PreviewLink mints a link to port of sandbox id, good for ttlSec (0: an
// hour; never past the lease's expiry).
func (c *Client) PreviewLink(ctx context.Context, id string, port int, ttlSec int64) (*PreviewLink, error) {
	var l PreviewLink
	return &l, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/ports/" + strconv.Itoa(port) + "/link", in: map[string]int64{"ttlSec": ttlSec}, out: &l})
}
