// Package preview is port previews: reading a preview address (the host
// form "{port}-{label}.{domain}" and the path form's port) out of untrusted
// request text; the signed, expiring preview links (an HMAC over org,
// sandbox and port with a secret the server keeps in its data directory)
// and their check; and the relay to a port on a sandbox's own loopback,
// over the exec channel, on the service's seam (Use). It knows nothing of
// HTTP handlers, the service or the store: it reaches them through
// interfaces of its own, and the API builds on it.
package preview

import (
	"net"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// DefaultDomain is the preview domain when the operator names none:
// browsers resolve every *.localhost name to the loopback with no DNS, so
// http://8000-ID.localhost:8080/ works out of the box on the server's own
// machine.
const DefaultDomain = "localhost"

// ParsePort reads a port as the path form gives it: decimal digits, no
// sign, no leading zero, 1-65535.
func ParsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, false
	}
	return p, true
}

// ParseHost reads a Host header of the host form, "{port}-{label}.{domain}"
// with an optional ":port" of the server and an optional trailing dot, and
// returns the sandbox port and id. The label is the id's DNS-safe spelling
// (Label: "sb-…"); the id itself ("sb_…", as links made before the label
// had it) is read too, so an old link keeps working. ok is false for any
// other host — the API's own name, a name under another domain, a
// malformed id or port — which the caller then serves as an ordinary API
// request. Names compare case-insensitively, as DNS does; a sandbox id is
// lower case.
func ParseHost(host, domain string) (port int, id string, ok bool) {
	if domain == "" || len(host) > 253+6 {
		return 0, "", false
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	suffix := "." + strings.TrimSuffix(strings.ToLower(domain), ".")
	label, found := strings.CutSuffix(name, suffix)
	if !found || strings.Contains(label, ".") {
		return 0, "", false
	}
	ps, id, found := strings.Cut(label, "-")
	if !found {
		return 0, "", false
	}
	id = sandbox.FromLabel(id)
	port, ok = ParsePort(ps)
	if !ok || !sandbox.ValidID(id) {
		return 0, "", false
	}
	return port, id, true
}

// Label is sandbox id's spelling in a host name (sandbox.Label).
func Label(id string) string { return sandbox.Label(id) }

// Host is the host form's name of port on sandbox id under domain, with
// the server's own port (serverPort, "" for none) kept.
func Host(port int, id, domain, serverPort string) string {
	h := strconv.Itoa(port) + "-" + Label(id) + "." + strings.TrimSuffix(domain, ".")
	if serverPort != "" {
		h = net.JoinHostPort(h, serverPort)
	}
	return h
}

// ValidDomain reports whether d can be a preview domain: one or more DNS
// labels (letters, digits, '-'), with no port, scheme or wildcard.
func ValidDomain(d string) bool {
	d = strings.TrimSuffix(d, ".")
	if d == "" || len(d) > 200 {
		return false
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
