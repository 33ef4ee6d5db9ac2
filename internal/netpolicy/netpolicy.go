// Package netpolicy is a sandbox's egress policy: what a lease may ask its
// network to reach (domains, CIDRs, ports, a deny list that wins), what the
// operator lets tenants ask for (Bounds), and the ranges no policy ever
// reaches. It is pure logic, shared by the backends that enforce it (the
// gvisor backend's host-side rules, resolver and proxy in internal/egress;
// the kube backend's NetworkPolicy objects) and by the service that checks
// a lease against the operator's bounds.
//
// A policy's entries are untrusted input: Parse checks every one (FuzzParse).
package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Internet is the entry that allows every public address (everything not in
// the never-reachable ranges).
const Internet = "internet"

// Limits on a policy's size: a policy is rules on the host for every
// sandbox, and a caller must not mint thousands of them.
const (
	MaxEntries = 128
	MaxPorts   = 32
)

// Policy is an egress policy as a lease asks for it and as its answer
// reports it; the type lives with the Sandbox it describes (the domain
// package depends on nothing of ours), the logic here.
type Policy = sandbox.NetworkPolicy

// Rules is a parsed policy, what the enforcers match against.
type Rules struct {
	Internet    bool
	AllowNames  []Name
	DenyNames   []Name
	AllowPrefix []netip.Prefix
	DenyPrefix  []netip.Prefix
	Ports       []uint16 // sorted; empty means any
}

// Name is a domain rule: an exact name, or (Wildcard) its strict
// subdomains.
type Name struct {
	Domain   string // lower case, no trailing dot
	Wildcard bool
}

func (n Name) String() string {
	if n.Wildcard {
		return "*." + n.Domain
	}
	return n.Domain
}

// Matches reports whether the (canonical) domain d is this rule's.
func (n Name) Matches(d string) bool {
	if n.Wildcard {
		return strings.HasSuffix(d, "."+n.Domain)
	}
	return d == n.Domain
}

// Parse checks and canonicalises p: every entry valid, duplicates dropped,
// addresses masked to their prefix. The error names the entry.
func Parse(p *Policy) (*Rules, error) {
	r := &Rules{}
	if p == nil {
		return r, nil
	}
	if len(p.Allow)+len(p.Deny) > MaxEntries {
		return nil, fmt.Errorf("a network policy has at most %d entries, this one %d", MaxEntries, len(p.Allow)+len(p.Deny))
	}
	if len(p.Ports) > MaxPorts {
		return nil, fmt.Errorf("a network policy lists at most %d ports, this one %d", MaxPorts, len(p.Ports))
	}
	for _, e := range p.Allow {
		if strings.EqualFold(strings.TrimSpace(e), Internet) {
			r.Internet = true
			continue
		}
		n, pfx, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("network allow entry %q: %w", e, err)
		}
		if pfx.IsValid() {
			r.AllowPrefix = appendUnique(r.AllowPrefix, pfx)
		} else {
			r.AllowNames = appendUnique(r.AllowNames, n)
		}
	}
	for _, e := range p.Deny {
		if strings.EqualFold(strings.TrimSpace(e), Internet) {
			return nil, errors.New(`network deny entry "internet": deny lists name what allow would reach; a sandbox with no network needs no policy`)
		}
		n, pfx, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("network deny entry %q: %w", e, err)
		}
		if pfx.IsValid() {
			r.DenyPrefix = appendUnique(r.DenyPrefix, pfx)
		} else {
			r.DenyNames = appendUnique(r.DenyNames, n)
		}
	}
	for _, port := range p.Ports {
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("network port %d: ports are 1-65535", port)
		}
		if !slices.Contains(r.Ports, uint16(port)) {
			r.Ports = append(r.Ports, uint16(port))
		}
	}
	slices.Sort(r.Ports)
	if len(p.Allow) == 0 && (len(p.Deny) > 0 || len(p.Ports) > 0) {
		return nil, errors.New("a network policy with deny entries or ports needs an allow entry (no allow entry means no network)")
	}
	return r, nil
}

func appendUnique[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// parseEntry parses a domain, a wildcard, an IPv4 address or CIDR.
func parseEntry(e string) (Name, netip.Prefix, error) {
	s := strings.TrimSpace(e)
	if s == "" {
		return Name{}, netip.Prefix{}, errors.New("empty")
	}
	if strings.ContainsAny(s, "/:") || isDottedNumbers(s) {
		var pfx netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			pfx, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			if err == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return Name{}, netip.Prefix{}, errors.New("not an IPv4 address or CIDR (a.b.c.d or a.b.c.d/n)")
		}
		if !pfx.Addr().Is4() || pfx.Addr().Zone() != "" {
			return Name{}, netip.Prefix{}, errors.New("IPv6 destinations are not supported: sandboxes have IPv4 egress only")
		}
		return Name{}, pfx.Masked(), nil
	}
	n, err := ParseName(s)
	return n, netip.Prefix{}, err
}

// isDottedNumbers says s looks like an IPv4 address (only digits and dots),
// so a malformed one is refused as an address, not taken as a domain.
func isDottedNumbers(s string) bool {
	return strings.Trim(s, "0123456789.") == ""
}

// ParseName parses a domain rule: "example.com" or "*.example.com".
func ParseName(s string) (Name, error) {
	var n Name
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		n.Wildcard, s = true, rest
	}
	d, err := CanonicalDomain(s)
	if err != nil {
		return Name{}, err
	}
	if !strings.Contains(d, ".") {
		return Name{}, errors.New("a domain needs at least two labels (example.com)")
	}
	n.Domain = d
	return n, nil
}

// CanonicalDomain lower-cases a DNS name, drops one trailing dot and
// checks it is a host name: labels of letters, digits, '-' and '_' (1-63
// bytes, no '-' at either end), 253 bytes in all.
func CanonicalDomain(s string) (string, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" || len(s) > 253 {
		return "", errors.New("not a domain name (1-253 bytes)")
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return "", errors.New("not a domain name (empty or over-long label)")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", errors.New("not a domain name (a label starts or ends with '-')")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return "", errors.New("a wildcard is only '*.' before a domain (*.example.com)")
				}
				return "", fmt.Errorf("not a domain name (byte %q)", c)
			}
		}
	}
	return s, nil
}

// Policy is the canonical form of r, what an answer reports.
func (r *Rules) Policy() *Policy {
	if r.None() {
		return nil
	}
	p := &Policy{}
	if r.Internet {
		p.Allow = append(p.Allow, Internet)
	}
	for _, n := range r.AllowNames {
		p.Allow = append(p.Allow, n.String())
	}
	for _, pfx := range r.AllowPrefix {
		p.Allow = append(p.Allow, prefixString(pfx))
	}
	for _, n := range r.DenyNames {
		p.Deny = append(p.Deny, n.String())
	}
	for _, pfx := range r.DenyPrefix {
		p.Deny = append(p.Deny, prefixString(pfx))
	}
	for _, port := range r.Ports {
		p.Ports = append(p.Ports, int(port))
	}
	return p
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// HasNames says the policy has domain rules, so names must be checked
// where they are visible (the resolver, and the proxy for TCP).
func (r *Rules) HasNames() bool { return len(r.AllowNames) > 0 || len(r.DenyNames) > 0 }

// NameDenied reports whether domain d is on the deny list.
func (r *Rules) NameDenied(d string) bool {
	return slices.ContainsFunc(r.DenyNames, func(n Name) bool { return n.Matches(d) })
}

// NameAllowed reports whether domain d is allowed by name (and not
// denied).
func (r *Rules) NameAllowed(d string) bool {
	return !r.NameDenied(d) && slices.ContainsFunc(r.AllowNames, func(n Name) bool { return n.Matches(d) })
}

// Resolves says whether the sandbox's resolver answers d: names the policy
// allows, and with "internet" every name not denied. A policy of CIDRs
// only resolves nothing, so the resolver cannot carry data out (a query for
// <data>.attacker.example reaches the attacker's name server).
func (r *Rules) Resolves(d string) bool {
	if r.NameDenied(d) {
		return false
	}
	return r.Internet || r.NameAllowed(d)
}

// PortAllowed reports whether the destination port is allowed.
func (r *Rules) PortAllowed(port uint16) bool {
	return len(r.Ports) == 0 || slices.Contains(r.Ports, port)
}

// AddrAllowed reports whether the policy's address rules (not its names)
// let a connection to a through: never-reachable ranges (in never) and the
// deny list refuse, "internet" and the allow CIDRs admit.
func (r *Rules) AddrAllowed(a netip.Addr, never *netipx.IPSet) bool {
	a = a.Unmap()
	if !a.Is4() || never.Contains(a) {
		return false
	}
	if slices.ContainsFunc(r.DenyPrefix, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return false
	}
	return r.Internet || slices.ContainsFunc(r.AllowPrefix, func(p netip.Prefix) bool { return p.Contains(a) })
}

// AddrDenied reports whether a is never reachable or on the deny list.
func (r *Rules) AddrDenied(a netip.Addr, never *netipx.IPSet) bool {
	a = a.Unmap()
	return !a.Is4() || never.Contains(a) || slices.ContainsFunc(r.DenyPrefix, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Reach says what a row of Reserved is to a sandbox.
type Reach int

const (
	// Unreachable rows are in every never-reachable set.
	Unreachable Reach = iota
	// Private rows are never reachable unless the operator opens them
	// (--network-private, Bounds.Private), one by one.
	Private
	// Reachable rows are in the registry but not in the set: IANA marks
	// them globally reachable (anycast services), or (the documentation
	// ranges 198.51.100.0/24 and 203.0.113.0/24) they stand for the public
	// internet in this project's test internets (internal/testenv) and
	// lead nowhere on the real one.
	Reachable
)

// Range is one row of Reserved.
type Range struct {
	Prefix netip.Prefix
	Name   string
	RFC    string
	Reach  Reach
}

func row(p, name, rfc string, reach Reach) Range {
	return Range{netip.MustParsePrefix(p), name, rfc, reach}
}

// Reserved is the one table of the IPv4 ranges a sandbox must not reach:
// the IANA IPv4 Special-Purpose Address Registry
// (https://www.iana.org/assignments/iana-ipv4-special-registry, every row,
// as of 2024-12), multicast (its own registry) and the clouds' metadata
// and host endpoints that are not link-local (a sandbox's traffic leaves
// with the VM's address, so the endpoint takes it for the VM's). The
// link-local metadata addresses (169.254.169.254 of AWS, GCP, Azure,
// OpenStack, DigitalOcean and others; AWS's 169.254.170.2; Tencent's
// 169.254.0.23; Scaleway's 169.254.42.42) are inside 169.254.0.0/16. IPv6
// is refused whole by both backends (no IPv6 egress), AWS's IPv6 metadata
// fd00:ec2::254 with it. Never is this table's set; the kube backend's
// NetworkPolicy excepts the same set.
var Reserved = []Range{
	row("0.0.0.0/8", "this network", "RFC 791", Unreachable),
	row("0.0.0.0/32", "this host on this network", "RFC 1122", Unreachable),
	row("10.0.0.0/8", "private-use", "RFC 1918", Private),
	row("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598", Private),
	row("127.0.0.0/8", "loopback", "RFC 1122", Unreachable),
	row("169.254.0.0/16", "link-local (most clouds' metadata, 169.254.169.254)", "RFC 3927", Unreachable),
	row("172.16.0.0/12", "private-use", "RFC 1918", Private),
	row("192.0.0.0/24", "IETF protocol assignments", "RFC 6890", Unreachable),
	row("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335", Unreachable),
	row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", Unreachable),
	row("192.0.0.9/32", "port control protocol anycast", "RFC 7723", Unreachable),     // inside 192.0.0.0/24
	row("192.0.0.10/32", "TURN anycast", "RFC 8155", Unreachable),                     // inside 192.0.0.0/24
	row("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880, RFC 7050", Unreachable), // inside 192.0.0.0/24
	row("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880, RFC 7050", Unreachable),
	row("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737", Unreachable),
	row("192.31.196.0/24", "AS112-v4", "RFC 7535", Reachable),
	row("192.52.193.0/24", "AMT", "RFC 7450", Reachable),
	row("192.88.99.0/24", "deprecated (6to4 relay anycast)", "RFC 7526", Unreachable),
	row("192.168.0.0/16", "private-use", "RFC 1918", Private),
	row("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534", Reachable),
	row("198.18.0.0/15", "benchmarking", "RFC 2544", Unreachable),
	row("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737", Reachable),
	row("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737", Reachable),
	row("224.0.0.0/4", "multicast", "RFC 5771", Unreachable),
	row("240.0.0.0/4", "reserved", "RFC 1112", Unreachable),
	row("255.255.255.255/32", "limited broadcast", "RFC 8190, RFC 919", Unreachable),
	// Metadata and host endpoints, never opened even where the operator
	// opens the private range around them.
	row("168.63.129.16/32", "Azure host endpoint (WireServer: agent, health probes, DNS)", "Azure docs", Unreachable),
	row("100.100.100.200/32", "Alibaba Cloud instance metadata", "Alibaba Cloud docs", Unreachable),
	row("192.0.0.192/32", "Oracle Cloud instance metadata (legacy)", "Oracle Cloud docs", Unreachable),
}

// AlwaysPrivate are the Private rows of Reserved, the ranges an operator
// may open one by one (Bounds.Private).
var AlwaysPrivate = func() []string {
	var out []string
	for _, r := range Reserved {
		if r.Reach == Private {
			out = append(out, r.Prefix.String())
		}
	}
	return out
}()

// Never is the set of addresses no policy reaches: the Unreachable rows of
// Reserved, the Private rows but what of them open opens, and extra (the
// sandboxes' own links, a cluster's pod and service ranges, the
// apiserver). open never opens an Unreachable row, even one inside an
// opened private range (Alibaba's metadata inside 100.64.0.0/10).
func Never(open []netip.Prefix, extra ...netip.Prefix) *netipx.IPSet {
	var priv netipx.IPSetBuilder
	for _, r := range Reserved {
		if r.Reach == Private {
			priv.AddPrefix(r.Prefix)
		}
	}
	for _, p := range open {
		priv.RemovePrefix(p)
	}
	privSet, _ := priv.IPSet()
	var b netipx.IPSetBuilder
	b.AddSet(privSet)
	for _, r := range Reserved {
		if r.Reach == Unreachable {
			b.AddPrefix(r.Prefix)
		}
	}
	for _, p := range extra {
		b.AddPrefix(p)
	}
	set, _ := b.IPSet()
	return set
}

// Bounds is what the operator lets tenants ask for. The zero value allows
// only "none".
type Bounds struct {
	// Internet lets a policy allow every public address.
	Internet bool
	// AnyName lets a policy allow any domain ("*" on the command line).
	AnyName bool
	// Names are the domain rules a policy's names must fall under.
	Names []Name
	// Prefixes are the CIDRs a policy's CIDRs must fall inside.
	Prefixes []netip.Prefix
	// Private are the private ranges taken out of the never-reachable set
	// (a policy still has to allow them).
	Private []netip.Prefix
}

// ParseBounds parses the operator's --network-allow entries ("internet",
// "*", domains, wildcards, CIDRs) and --network-private CIDRs.
func ParseBounds(allow, private []string) (Bounds, error) {
	var b Bounds
	for _, e := range allow {
		switch s := strings.TrimSpace(e); {
		case strings.EqualFold(s, Internet):
			b.Internet = true
		case s == "*":
			b.AnyName = true
		default:
			n, pfx, err := parseEntry(s)
			if err != nil {
				return Bounds{}, fmt.Errorf("--network-allow %q: %w", e, err)
			}
			if pfx.IsValid() {
				b.Prefixes = append(b.Prefixes, pfx)
			} else {
				b.Names = append(b.Names, n)
			}
		}
	}
	for _, e := range private {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(e))
		if err != nil || !pfx.Addr().Is4() {
			return Bounds{}, fmt.Errorf("--network-private %q: not an IPv4 CIDR", e)
		}
		pfx = pfx.Masked()
		inside := false
		for _, s := range AlwaysPrivate {
			if q := netip.MustParsePrefix(s); q.Bits() <= pfx.Bits() && q.Contains(pfx.Addr()) {
				inside = true
			}
		}
		if !inside {
			return Bounds{}, fmt.Errorf("--network-private %q: not inside a private range (%s)", e, strings.Join(AlwaysPrivate, ", "))
		}
		b.Private = append(b.Private, pfx)
	}
	return b, nil
}

// None says the bounds allow no network at all.
func (b Bounds) None() bool {
	return !b.Internet && !b.AnyName && len(b.Names) == 0 && len(b.Prefixes) == 0
}

// Check refuses a policy that asks for more than the bounds allow, naming
// the first entry out of bounds. Deny entries and ports only narrow, so
// they are always allowed.
func (b Bounds) Check(r *Rules) error {
	if r.Internet && !b.Internet {
		return errors.New(`this server does not let sandboxes reach the internet ("internet" is not in its --network-allow)`)
	}
	for _, n := range r.AllowNames {
		if !b.AnyName && !slices.ContainsFunc(b.Names, func(o Name) bool { return o.Covers(n) }) {
			return fmt.Errorf("this server does not let sandboxes reach %s (not under its --network-allow)", n)
		}
	}
	never := Never(b.Private)
	for _, p := range r.AllowPrefix {
		if slices.ContainsFunc(b.Prefixes, func(o netip.Prefix) bool { return o.Bits() <= p.Bits() && o.Contains(p.Addr()) }) {
			continue
		}
		if b.Internet && !never.OverlapsPrefix(p) {
			continue
		}
		return fmt.Errorf("this server does not let sandboxes reach %s (not inside its --network-allow)", prefixString(p))
	}
	return nil
}

// Covers reports whether every name rule n matches is also o's.
func (o Name) Covers(n Name) bool {
	if !o.Wildcard {
		return !n.Wildcard && n.Domain == o.Domain
	}
	return strings.HasSuffix(n.Domain, "."+o.Domain) || (n.Wildcard && n.Domain == o.Domain)
}

// None reports whether the rules allow nothing.
func (r *Rules) None() bool {
	return r == nil || (!r.Internet && len(r.AllowNames) == 0 && len(r.AllowPrefix) == 0)
}
