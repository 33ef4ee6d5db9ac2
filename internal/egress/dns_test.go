package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

func rr(t testing.TB, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFilterAnswer: a sandbox gets the CNAME chain from the name it asked
// and the A records at its end that its policy reaches, nothing else —
// whatever record of the upstream's answer could carry an address.
func TestFilterAnswer(t *testing.T) {
	never := netpolicy.Never(nil)
	inet, _ := netpolicy.Parse(&netpolicy.Policy{Allow: []string{"internet"}})
	allow := func(ip netip.Addr) bool { return !inet.AddrDenied(ip, never) }
	resp := new(dns.Msg)
	resp.Answer = []dns.RR{
		rr(t, "www.x.example. 300 IN CNAME edge.cdn.example."),
		rr(t, "edge.cdn.example. 86400 IN CNAME Edge2.CDN.example."),
		rr(t, "edge2.cdn.example. 999999 IN A 203.0.113.10"),
		rr(t, "edge2.cdn.example. 60 IN A 169.254.169.254"),
		rr(t, "edge2.cdn.example. 60 IN A 10.1.2.3"),
		rr(t, "edge2.cdn.example. 60 IN A 168.63.129.16"),
		rr(t, "edge2.cdn.example. 60 IN A 203.0.113.10"), // again
		rr(t, "edge2.cdn.example. 60 IN AAAA ::1"),
		rr(t, "other.example. 60 IN A 203.0.113.20"), // off the chain
		rr(t, "www.x.example. 60 IN A 203.0.113.30"), // not the chain's end
		rr(t, "edge2.cdn.example. 60 IN TXT \"10.0.0.1\""),
		rr(t, "edge2.cdn.example. 60 IN SRV 0 0 80 internal.corp."),
		&dns.A{Hdr: dns.RR_Header{Name: "edge2.cdn.example.", Rrtype: dns.TypeA, Class: dns.ClassCHAOS, Ttl: 60}, A: net.IPv4(203, 0, 113, 40)},
	}
	resp.Ns = []dns.RR{rr(t, "example. 60 IN NS ns.example.")}
	resp.Extra = []dns.RR{rr(t, "ns.example. 60 IN A 127.0.0.1")}
	ans, addrs, ttl := filterAnswer("www.x.example.", resp, allow, true)
	var got []string
	for _, r := range ans {
		got = append(got, strings.ReplaceAll(r.String(), "\t", " "))
	}
	want := []string{
		"www.x.example. 300 IN CNAME edge.cdn.example.",
		"edge.cdn.example. 3600 IN CNAME Edge2.CDN.example.",
		"edge2.cdn.example. 3600 IN A 203.0.113.10",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("answer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(addrs) != 1 || addrs[0] != netip.MustParseAddr("203.0.113.10") || ttl != 300 {
		t.Errorf("addrs %v ttl %d, want [203.0.113.10] 300", addrs, ttl)
	}

	// 500 addresses: the first maxAddrs.
	many := new(dns.Msg)
	for i := range 500 {
		many.Answer = append(many.Answer, &dns.A{Hdr: dns.RR_Header{Name: "many.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(8, 8, byte(i>>8), byte(i))})
	}
	if ans, addrs, _ := filterAnswer("many.example.", many, allow, true); len(ans) != maxAddrs || len(addrs) != maxAddrs {
		t.Errorf("500 addresses: %d kept, want %d", len(addrs), maxAddrs)
	}
	// A CNAME loop answers nothing.
	loop := new(dns.Msg)
	loop.Answer = []dns.RR{rr(t, "a.example. 60 IN CNAME b.example."), rr(t, "b.example. 60 IN CNAME a.example."), rr(t, "a.example. 60 IN A 203.0.113.1")}
	if ans, addrs, _ := filterAnswer("a.example.", loop, allow, true); len(ans) != 0 || len(addrs) != 0 {
		t.Errorf("a CNAME loop answered %v", ans)
	}
}

// TestForwardable: only names of two labels or more outside the local
// zones go upstream.
func TestForwardable(t *testing.T) {
	for name, want := range map[string]bool{
		"example.com": true, "a.b.example": true, "wpad": false, "printer.local": false, "metadata.google.internal": false,
		"1.0.0.10.in-addr.arpa": false, "x.localhost": false, "router.lan": false, "abc.onion": false, "x.home": false,
	} {
		if forwardable(name) != want {
			t.Errorf("forwardable(%s) = %v", name, !want)
		}
	}
}

// TestRememberBounded: a sandbox's remembered answers stay within
// maxNames names of maxAddrs addresses each, TTLs within maxTTL, and an
// expired answer is pruned before a live one is evicted.
func TestRememberBounded(t *testing.T) {
	m := &Manager{pool: netip.MustParsePrefix(DefaultSubnet), byKey: map[string]*entry{}, byIP: map[netip.Addr]*entry{}}
	e := m.newEntry("k", 1, &netpolicy.Rules{Internet: true})
	m.byKey["k"] = e
	m.remember(e, "old.example", []netip.Addr{netip.MustParseAddr("203.0.113.1")}, time.Nanosecond)
	time.Sleep(time.Millisecond)
	var addrs []netip.Addr
	for i := range 100 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{8, 8, 8, byte(i)}))
	}
	for i := range maxNames + 10 {
		m.remember(e, fmt.Sprintf("n%d.example", i), addrs, 365*24*time.Hour)
	}
	if len(e.answers) > maxNames {
		t.Errorf("%d names remembered, bound %d", len(e.answers), maxNames)
	}
	if _, ok := e.answers["old.example"]; ok {
		t.Error("an expired answer outlived the pruning")
	}
	for n, a := range e.answers {
		if len(a.addrs) > maxAddrs || time.Until(a.expires) > maxTTL {
			t.Fatalf("%s: %d addresses, %v left", n, len(a.addrs), time.Until(a.expires))
		}
	}
	// Round-robin answers of one name keep its newest maxAddrs.
	for i := range 10 {
		m.remember(e, "rr.example", addrs[i*10:i*10+10], time.Minute)
	}
	if a := e.answers["rr.example"]; len(a.addrs) != maxAddrs || a.addrs[0] != addrs[90] {
		t.Errorf("rr.example: %d addresses, first %v", len(a.addrs), a.addrs[0])
	}
}

// FuzzFilterAnswer: whatever the upstream answers, a sandbox gets only the
// CNAME chain from its name and A records of the chain's end that its
// policy reaches, at most maxAddrs, each TTL within maxTTL.
func FuzzFilterAnswer(f *testing.F) {
	seed := new(dns.Msg)
	seed.SetQuestion("www.x.example.", dns.TypeA)
	seed.Answer = []dns.RR{
		&dns.CNAME{Hdr: dns.RR_Header{Name: "www.x.example.", Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 60}, Target: "y.example."},
		&dns.A{Hdr: dns.RR_Header{Name: "y.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(203, 0, 113, 1)},
		&dns.A{Hdr: dns.RR_Header{Name: "y.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)},
		&dns.TXT{Hdr: dns.RR_Header{Name: "y.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"x"}},
	}
	b, _ := seed.Pack()
	f.Add(b)
	never := netpolicy.Never(nil)
	inet, _ := netpolicy.Parse(&netpolicy.Policy{Allow: []string{"internet"}})
	allow := func(ip netip.Addr) bool { return !inet.AddrDenied(ip, never) }
	f.Fuzz(func(t *testing.T, raw []byte) {
		resp := new(dns.Msg)
		if resp.Unpack(raw) != nil {
			return
		}
		ans, addrs, ttl := filterAnswer("www.x.example.", resp, allow, true)
		if len(addrs) > maxAddrs {
			t.Fatalf("%d addresses", len(addrs))
		}
		if ttl > uint32(maxTTL/time.Second) {
			t.Fatalf("ttl %d", ttl)
		}
		name := "www.x.example."
		var as int
		for i, r := range ans {
			h := r.Header()
			if h.Class != dns.ClassINET || h.Ttl > uint32(maxTTL/time.Second) {
				t.Fatalf("record %v", r)
			}
			switch r := r.(type) {
			case *dns.CNAME:
				if as > 0 || !strings.EqualFold(h.Name, name) {
					t.Fatalf("CNAME %v off the chain (at %d)", r, i)
				}
				name = r.Target
			case *dns.A:
				ip, _ := netip.AddrFromSlice(r.A.To4())
				if !strings.EqualFold(h.Name, name) || never.Contains(ip) || !allow(ip) {
					t.Fatalf("A %v passed", r)
				}
				as++
			default:
				t.Fatalf("a %T passed: %v", r, r)
			}
		}
		if as != len(addrs) {
			t.Fatalf("%d A records, %d addresses", as, len(addrs))
		}
		// What passes packs: the sandbox gets a well-formed reply.
		out := new(dns.Msg)
		out.SetQuestion("www.x.example.", dns.TypeA)
		out.Answer = ans
		if _, err := out.Pack(); err != nil {
			t.Fatalf("the filtered answer does not pack: %v", err)
		}
	})
}
