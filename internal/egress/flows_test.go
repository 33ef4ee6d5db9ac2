package egress

import (
	"net"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

func rules(t *testing.T, allow, deny []string, ports ...uint16) *netpolicy.Rules {
	t.Helper()
	p := &netpolicy.Policy{Allow: allow, Deny: deny}
	for _, port := range ports {
		p.Ports = append(p.Ports, int(port))
	}
	r, err := netpolicy.Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFlowKept: what a change keeps of the forwarded flows is what the
// forward chain would admit as new under the new policy.
func TestFlowKept(t *testing.T) {
	pool := netip.MustParsePrefix(DefaultSubnet)
	rs := &ruleset{pool: pool, svc: pool.Addr().Next(), never: netpolicy.Never(nil, pool)}
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		r     *netpolicy.Rules
		proto uint8
		dst   netip.AddrPort
		keep  bool
	}{
		{rules(t, nil, nil), unix.IPPROTO_TCP, ap("203.0.113.20:80"), false},
		{rules(t, []string{"203.0.113.20"}, nil), unix.IPPROTO_TCP, ap("203.0.113.20:80"), true},
		{rules(t, []string{"203.0.113.20"}, nil), unix.IPPROTO_TCP, ap("203.0.113.10:80"), false},
		{rules(t, []string{"203.0.113.20"}, nil, 443), unix.IPPROTO_TCP, ap("203.0.113.20:80"), false},
		{rules(t, []string{"203.0.113.20"}, nil, 443), unix.IPPROTO_ICMP, ap("203.0.113.20:0"), false},
		{rules(t, []string{"internet"}, nil), unix.IPPROTO_UDP, ap("203.0.113.20:53"), false},
		{rules(t, []string{"internet"}, nil), unix.IPPROTO_UDP, ap("203.0.113.20:443"), true},
		{rules(t, []string{"internet"}, nil), unix.IPPROTO_TCP, ap("10.0.0.1:80"), false},
		{rules(t, []string{"internet"}, []string{"203.0.113.0/24"}), unix.IPPROTO_TCP, ap("203.0.113.20:80"), false},
		// A policy with names sends TCP through the proxy: a direct flow
		// would skip the name check.
		{rules(t, []string{"internet"}, []string{"x.example"}), unix.IPPROTO_TCP, ap("203.0.113.20:80"), false},
		{rules(t, []string{"internet"}, []string{"x.example"}), unix.IPPROTO_UDP, ap("203.0.113.20:443"), true},
	} {
		allowed := rs.allowedSet(c.r)
		if got := rs.forwards(c.r, allowed.Contains, c.proto, c.dst); got != c.keep {
			t.Errorf("%v: proto %d to %v kept = %v, want %v", c.r.Policy(), c.proto, c.dst, got, c.keep)
		}
	}
	// The filter: only the sandbox's own flows, never the proxy's or the
	// resolver's (the proxy judges those), all of them at the end.
	me := netip.MustParseAddr("10.254.0.6")
	flowOf := func(src, dst, replySrc string, port uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst), DstPort: port, Protocol: unix.IPPROTO_TCP},
			Reverse: netlink.IPTuple{SrcIP: net.ParseIP(replySrc)},
		}
	}
	none := func(uint8, netip.AddrPort) bool { return false }
	f := &flowFilter{src: me, svc: rs.svc, keep: none}
	for _, c := range []struct {
		fl   *netlink.ConntrackFlow
		want bool
	}{
		{flowOf("10.254.0.6", "203.0.113.20", "203.0.113.20", 80), true},
		{flowOf("10.254.0.10", "203.0.113.20", "203.0.113.20", 80), false},
		{flowOf("10.254.0.6", "203.0.113.20", "10.254.0.1", 80), false}, // DNAT'd to the proxy
		{flowOf("10.254.0.6", "10.254.0.1", "10.254.0.1", 53), false},   // the resolver
	} {
		if got := f.MatchConntrackFlow(c.fl); got != c.want {
			t.Errorf("filter(%s→%s) = %v, want %v", c.fl.Forward.SrcIP, c.fl.Forward.DstIP, got, c.want)
		}
	}
	all := &flowFilter{src: me, svc: rs.svc}
	if !all.MatchConntrackFlow(flowOf("10.254.0.6", "203.0.113.20", "10.254.0.1", 80)) {
		t.Error("the end keeps a proxied flow's entry")
	}
}

// TestScreenAnswer: an answer whose CNAME chain runs through a denied
// name is that name's: refused, and its addresses learned.
func TestScreenAnswer(t *testing.T) {
	m := &Manager{byKey: map[string]*entry{}}
	e := &entry{link: link{key: "k", rules: rules(t, []string{"internet"}, []string{"x.example"})}, deny: newDeny()}
	resp := new(dns.Msg)
	resp.Answer = []dns.RR{
		&dns.CNAME{Hdr: dns.RR_Header{Name: "alias.example.", Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 30}, Target: "X.example."},
		&dns.A{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("203.0.113.30")},
	}
	m.screenAnswer(e, "alias.example", resp)
	if len(resp.Answer) != 0 || resp.Rcode != dns.RcodeNameError {
		t.Errorf("an alias of a denied name answered: %v", resp)
	}
	close(e.deny.ready)
	if !m.deniedAddr(e, netip.MustParseAddr("203.0.113.30"), true) || m.deniedAddr(e, netip.MustParseAddr("203.0.113.20"), true) {
		t.Errorf("learned: %v", e.deny.names)
	}
	// A record of the denied name off the chain (a hostile upstream's
	// extra) is not the chain's: nothing learned, nothing refused.
	ok := new(dns.Msg)
	ok.Answer = []dns.RR{
		&dns.A{Hdr: dns.RR_Header{Name: "raw.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("203.0.113.20")},
		&dns.CNAME{Hdr: dns.RR_Header{Name: "elsewhere.example.", Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 30}, Target: "x.example."},
		&dns.A{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP("203.0.113.40")},
	}
	m.screenAnswer(e, "raw.example", ok)
	if len(ok.Answer) != 3 || m.deniedAddr(e, netip.MustParseAddr("203.0.113.40"), true) {
		t.Errorf("an answer of an allowed name was screened out, or taught: %v", ok.Answer)
	}
}
