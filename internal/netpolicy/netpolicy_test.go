package netpolicy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
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
	for a, want := range map[string]bool{"192.0.2.1": true, "10.0.0.1": false, "172.16.5.5": false, "192.168.1.1": false, "100.64.0.1": false, "0.1.2.3": false, "224.0.0.1": false, "255.255.255.255": false} {
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
