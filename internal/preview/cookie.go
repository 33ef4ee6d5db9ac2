package preview

import "strings"

// HostOnlyCookie is an app's Set-Cookie line with every Domain attribute
// removed, so the browser keeps the cookie for the preview's own host
// alone. Every preview is a host under one preview domain; a cookie an app
// set with Domain=the preview domain (or a parent of it) would reach every
// other preview under it, another tenant's included, and with a preview
// domain under the API's own domain the API too.
//
// The line is split the way browsers split it (RFC 6265 §5.2: on ';',
// attribute names compared case-insensitively after trimming whitespace),
// so no attribute a browser would read as Domain survives. Everything else
// is kept byte for byte. Trimming is wider than a browser's (any Unicode
// space, not only space and tab): what this strips is a superset of what a
// browser honours.
func HostOnlyCookie(line string) string {
	parts := strings.Split(line, ";")
	kept := parts[:1:1] // the name=value pair is never an attribute
	for _, a := range parts[1:] {
		name, _, _ := strings.Cut(a, "=")
		if strings.EqualFold(strings.TrimSpace(name), "domain") {
			continue
		}
		kept = append(kept, a)
	}
	return strings.Join(kept, ";")
}
