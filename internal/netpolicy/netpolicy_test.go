package netpolicy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"go4.org/netipx"
)

func TestParse(t *testing.T) {
	r, err := Parse(&Policy{
		Allow: []string{"Internet", "PyPI.org.", "*.github.com", "203.0.113.7", "198.51.100.9/24", "pypi.org"},
		Deny:  []string{"evil.example", "203.0.113.8/32"},
		Ports: []int{443, 80, 443},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{
		Allow: []string{"internet", "pypi.org", "*.github.com", "203.0.113.7", "198.51.100.0/24"},
		Deny:  []string{"evil.example", "203.0.113.8"},
		Ports: []int{80, 443},
	}
	if got := r.Policy(); !reflect.DeepEqual(got, want) {
		t.Fatalf("canonical policy = %+v, want %+v", got, want)
	}
	for _, bad := range []Policy{
		{Allow: []string{"*"}},
		{Allow: []string{"a.*.com"}},
		{Allow: []string{"localhost"}},
		{Allow: []string{"2001:db8::/32"}},
		{Allow: []string{"300.1.1.1"}},
		{Allow: []string{"1.2.3"}},
		{Allow: []string{"-bad.example"}},
		{Allow: []string{"exa mple.com"}},
		{Allow: []string{""}},
		{Allow: []string{"pypi.org"}, Deny: []string{"internet"}},
		{Allow: []string{"pypi.org"}, Ports: []int{0}},
		{Allow: []string{"pypi.org"}, Ports: []int{65536}},
		{Deny: []string{"pypi.org"}},
		{Ports: []int{80}},
	} {
		if _, err := Parse(&bad); err == nil {
			t.Errorf("Parse(%+v) accepted", bad)
		}
	}
	if r, err := Parse(nil); err != nil || r.Policy() != nil {
		t.Errorf("Parse(nil) = %+v, %v; want none", r, err)
	}
}

func TestMatching(t *testing.T) {
	r, err := Parse(&Policy{Allow: []string{"pypi.org", "*.github.com", "203.0.113.0/24"}, Deny: []string{"gist.github.com", "203.0.113.9"}, Ports: []int{443}})
	if err != nil {
		t.Fatal(err)
	}
	never := Never(nil)
	for d, want := range map[string]bool{
		"pypi.org": true, "files.pypi.org": false, "api.github.com": true, "github.com": false,
		"gist.github.com": false, "x.gist.github.com": true, "evilgithub.com": false,
	} {
		if got := r.NameAllowed(d); got != want {
			t.Errorf("NameAllowed(%s) = %v, want %v", d, got, want)
		}
		if r.Resolves(d) != want {
			t.Errorf("Resolves(%s) = %v, want %v", d, !want, want)
		}
	}
	for a, want := range map[string]bool{
		"203.0.113.1": true, "203.0.113.9": false, "198.51.100.1": false,
		"127.0.0.1": false, "169.254.169.254": false, "10.1.2.3": false,
	} {
		if got := r.AddrAllowed(netip.MustParseAddr(a), never); got != want {
			t.Errorf("AddrAllowed(%s) = %v, want %v", a, got, want)
		}
	}
	if !r.PortAllowed(443) || r.PortAllowed(80) {
		t.Error("ports: want only 443")
	}
	inet, _ := Parse(&Policy{Allow: []string{"internet"}, Deny: []string{"evil.example"}})
	for a, want := range map[string]bool{"203.0.113.1": true, "8.8.8.8": true, "192.0.2.1": false, "198.18.0.1": false, "168.63.129.16": false, "10.0.0.1": false, "172.16.5.5": false, "192.168.1.1": false, "100.64.0.1": false, "0.1.2.3": false, "224.0.0.1": false, "255.255.255.255": false} {
		if got := inet.AddrAllowed(netip.MustParseAddr(a), never); got != want {
			t.Errorf("internet AddrAllowed(%s) = %v, want %v", a, got, want)
		}
	}
	if !inet.Resolves("anything.example") || inet.Resolves("evil.example") || inet.Resolves("a.evil.example") != true {
		t.Error("internet resolves every name but the denied ones (exact deny leaves subdomains)")
	}
	cidrs, _ := Parse(&Policy{Allow: []string{"203.0.113.0/24"}})
	if cidrs.Resolves("attacker.example") {
		t.Error("a CIDR-only policy must resolve nothing (DNS would carry data out)")
	}
}

func TestNeverOpensPrivateOnly(t *testing.T) {
	n := Never([]netip.Prefix{netip.MustParsePrefix("10.5.0.0/16")})
	if n.Contains(netip.MustParseAddr("10.5.1.1")) != false || !n.Contains(netip.MustParseAddr("10.6.1.1")) {
		t.Error("an opened private range must leave only itself open")
	}
	n = Never([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")})
	if !n.Contains(netip.MustParseAddr("127.0.0.1")) || !n.Contains(netip.MustParseAddr("169.254.169.254")) {
		t.Error("loopback and link-local are never opened")
	}
	extra := Never(nil, netip.MustParsePrefix("198.51.100.0/24"))
	if !extra.Contains(netip.MustParseAddr("198.51.100.77")) {
		t.Error("extra ranges are never reachable")
	}
}

// TestReserved: the never-reachable table is the IANA special-purpose
// registry's rows and the clouds' metadata endpoints, and Never is built
// from it: every row is where it says, and an operator's private opening,
// however wide, opens no metadata endpoint.
func TestReserved(t *testing.T) {
	want := map[string]Reach{
		"0.0.0.0/8": Unreachable, "0.0.0.0/32": Unreachable, "10.0.0.0/8": Private, "100.64.0.0/10": Private,
		"127.0.0.0/8": Unreachable, "169.254.0.0/16": Unreachable, "172.16.0.0/12": Private,
		"192.0.0.0/24": Unreachable, "192.0.0.0/29": Unreachable, "192.0.0.8/32": Unreachable, "192.0.0.9/32": Unreachable,
		"192.0.0.10/32": Unreachable, "192.0.0.170/32": Unreachable, "192.0.0.171/32": Unreachable,
		"192.0.2.0/24": Unreachable, "192.31.196.0/24": Reachable, "192.52.193.0/24": Reachable,
		"192.88.99.0/24": Unreachable, "192.168.0.0/16": Private, "192.175.48.0/24": Reachable,
		"198.18.0.0/15": Unreachable, "198.51.100.0/24": Reachable, "203.0.113.0/24": Reachable,
		"224.0.0.0/4": Unreachable, "240.0.0.0/4": Unreachable, "255.255.255.255/32": Unreachable,
		"168.63.129.16/32": Unreachable, "100.100.100.200/32": Unreachable, "192.0.0.192/32": Unreachable,
	}
	seen := map[string]bool{}
	for _, r := range Reserved {
		s := r.Prefix.String()
		if seen[s] {
			t.Errorf("row %s twice", s)
		}
		seen[s] = true
		if w, ok := want[s]; !ok || w != r.Reach {
			t.Errorf("row %s (%s): reach %d, want %d (listed %v)", s, r.Name, r.Reach, w, ok)
		}
		if r.Name == "" || r.RFC == "" || r.Prefix != r.Prefix.Masked() || !r.Prefix.Addr().Is4() {
			t.Errorf("row %+v: a masked IPv4 prefix, a name and a source each", r)
		}
	}
	for s := range want {
		if !seen[s] {
			t.Errorf("row %s missing", s)
		}
	}
	// The operator opens every private range it can.
	b, err := ParseBounds([]string{"internet"}, AlwaysPrivate)
	if err != nil {
		t.Fatal(err)
	}
	closed, opened := Never(nil), Never(b.Private)
	for _, r := range Reserved {
		first, last := r.Prefix.Addr(), netipx.PrefixLastIP(r.Prefix)
		switch r.Reach {
		case Unreachable:
			if !closed.ContainsPrefix(r.Prefix) || !opened.ContainsPrefix(r.Prefix) {
				t.Errorf("%s (%s) is reachable", r.Prefix, r.Name)
			}
		case Private:
			if !closed.ContainsPrefix(r.Prefix) {
				t.Errorf("%s (%s) is reachable unopened", r.Prefix, r.Name)
			}
		case Reachable:
			if closed.Contains(first) || closed.Contains(last) {
				t.Errorf("%s (%s) is in the set", r.Prefix, r.Name)
			}
		}
	}
	inet, _ := Parse(&Policy{Allow: []string{"internet", "100.64.0.0/10"}})
	for _, a := range []string{"100.100.100.200", "168.63.129.16", "192.0.0.192", "198.19.255.255", "192.0.0.1"} {
		if inet.AddrAllowed(netip.MustParseAddr(a), opened) {
			t.Errorf("%s reachable with every private range open", a)
		}
	}
	if !inet.AddrAllowed(netip.MustParseAddr("100.100.100.201"), opened) {
		t.Error("the opened 100.64.0.0/10 is not open")
	}
	// Bounds refuse a policy asking for a metadata address by CIDR.
	for _, a := range []string{"168.63.129.16", "100.100.100.200", "192.0.0.192", "198.18.0.0/15"} {
		r, _ := Parse(&Policy{Allow: []string{a}})
		if err := b.Check(r); err == nil {
			t.Errorf("bounds with every private range open accept %s", a)
		}
	}
}

func TestBounds(t *testing.T) {
	if _, err := ParseBounds([]string{"internet", "*", "*.github.com", "203.0.113.0/24"}, []string{"10.5.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBounds(nil, []string{"203.0.113.0/24"}); err == nil {
		t.Error("--network-private outside the private ranges accepted")
	}
	b, _ := ParseBounds([]string{"*.github.com", "pypi.org", "203.0.113.0/24", "10.5.0.0/16"}, []string{"10.5.0.0/16"})
	for _, c := range []struct {
		allow []string
		ok    bool
	}{
		{[]string{"api.github.com"}, true},
		{[]string{"*.api.github.com"}, true},
		{[]string{"*.github.com"}, true},
		{[]string{"github.com"}, false},
		{[]string{"pypi.org"}, true},
		{[]string{"files.pypi.org"}, false},
		{[]string{"203.0.113.128/25"}, true},
		{[]string{"203.0.112.0/23"}, false},
		{[]string{"10.5.1.0/24"}, true},
		{[]string{"internet"}, false},
	} {
		r, err := Parse(&Policy{Allow: c.allow})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Check(r); (err == nil) != c.ok {
			t.Errorf("Check(%v) = %v, want ok=%v", c.allow, err, c.ok)
		}
	}
	inet, _ := ParseBounds([]string{"internet"}, nil)
	for allow, ok := range map[string]bool{"203.0.113.0/24": true, "10.0.0.0/8": false, "0.0.0.0/0": false, "pypi.org": false} {
		r, _ := Parse(&Policy{Allow: []string{allow}})
		if err := inet.Check(r); (err == nil) != ok {
			t.Errorf("internet bounds Check(%s) = %v, want ok=%v", allow, err, ok)
		}
	}
	var none Bounds
	r, _ := Parse(&Policy{Allow: []string{"pypi.org"}})
	if err := none.Check(r); err == nil || !strings.Contains(err.Error(), "--network-allow") {
		t.Errorf("zero bounds must refuse every policy, saying which flag: %v", err)
	}
}

// FuzzParse: whatever a caller sends, Parse either refuses it or returns
// rules whose canonical form parses to the same rules (a fixed point), and
// nothing it accepts is a name with bytes outside a host name's.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.github.com", "203.0.113.0/24", "internet", "1.2.3.4", "::1", "a..b", "*.*.x", "x.y."} {
		f.Add(s, "evil.example", 443)
	}
	f.Fuzz(func(t *testing.T, allow, deny string, port int) {
		r, err := Parse(&Policy{Allow: strings.Split(allow, ","), Deny: strings.Split(deny, ","), Ports: []int{port}})
		if err != nil {
			return
		}
		again, err := Parse(r.Policy())
		if err != nil {
			t.Fatalf("canonical form %+v does not parse: %v", r.Policy(), err)
		}
		if !reflect.DeepEqual(again.Policy(), r.Policy()) {
			t.Fatalf("not a fixed point: %+v then %+v", r.Policy(), again.Policy())
		}
		for _, n := range append(r.AllowNames, r.DenyNames...) {
			if strings.Trim(n.Domain, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
				t.Fatalf("accepted name %q", n.Domain)
			}
		}
	})
}
