package preview

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	id    = "sb_abcdefghijklmnopqrstuvwxyz"
	label = "sb-abcdefghijklmnopqrstuvwxyz"
)

func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		host, domain string
		port         int
		id           string
	}{
		{"8000-" + label + ".localhost", "localhost", 8000, id},
		{"8000-" + label + ".localhost:8080", "localhost", 8000, id},
		{"8000-SB-ABCDEFGHIJKLMNOPQRSTUVWXYZ.localhost", "localhost", 8000, id},
		{"8000-" + id + ".localhost", "localhost", 8000, id}, // the id itself, as older links have it
		{"8000-" + id + ".LOCALHOST.:8080", "localhost", 8000, id},
		{"8000-SB_ABCDEFGHIJKLMNOPQRSTUVWXYZ.localhost", "localhost", 8000, id}, // DNS is case-blind
		{"1-" + id + ".preview.example.com", "preview.example.com", 1, id},
		{"65535-" + id + ".preview.example.com", "preview.example.com.", 65535, id},
		{"localhost:8080", "localhost", 0, ""},
		{"127.0.0.1:8080", "localhost", 0, ""},
		{"[::1]:8080", "localhost", 0, ""},
		{"", "localhost", 0, ""},
		{"8000-" + id + ".localhost", "", 0, ""},
		{"8000-" + id + ".evil.localhost", "localhost", 0, ""},         // one label only
		{"a.8000-" + id + ".localhost", "localhost", 0, ""},            // one label only
		{"8000-" + id + ".localhostx", "localhost", 0, ""},             // not under the domain
		{"8000-" + id + "localhost", "localhost", 0, ""},               // no dot
		{"08000-" + id + ".localhost", "localhost", 0, ""},             // leading zero
		{"0-" + id + ".localhost", "localhost", 0, ""},                 // port 0
		{"65536-" + id + ".localhost", "localhost", 0, ""},             // out of range
		{"+80-" + id + ".localhost", "localhost", 0, ""},               // sign
		{"8000-sb_abc.localhost", "localhost", 0, ""},                  // short id
		{"8000-sb-abc.localhost", "localhost", 0, ""},                  // short label
		{"8000-sb--" + id[3:] + ".localhost", "localhost", 0, ""},      // not a label
		{"8000-" + label + "x.localhost", "localhost", 0, ""},          // long label
		{"8000-" + id + "x.localhost", "localhost", 0, ""},             // long id
		{"8000-" + id[:len(id)-1] + "1.localhost", "localhost", 0, ""}, // not base32
		{"8000" + id + ".localhost", "localhost", 0, ""},               // no dash
		{".localhost", "localhost", 0, ""},
	} {
		port, got, ok := ParseHost(c.host, c.domain)
		if port != c.port || got != c.id || ok != (c.id != "") {
			t.Errorf("ParseHost(%q, %q) = %d %q %v; want %d %q", c.host, c.domain, port, got, ok, c.port, c.id)
		}
	}
}

// TestHostIsDNSName: the name Host makes is letters, digits, '-' and dots
// only, each label at most 63 bytes (RFC 1123), and parses back.
func TestHostIsDNSName(t *testing.T) {
	h := Host(65535, id, "preview.example.com", "")
	if want := "65535-" + label + ".preview.example.com"; h != want {
		t.Fatalf("Host = %q; want %q", h, want)
	}
	if !ValidDomain(h) {
		t.Errorf("%q is not a DNS name", h)
	}
	if p, got, ok := ParseHost(h, "preview.example.com"); !ok || p != 65535 || got != id {
		t.Errorf("ParseHost(%q) = %d %q %v", h, p, got, ok)
	}
}

func TestParsePort(t *testing.T) {
	for s, want := range map[string]int{"1": 1, "80": 80, "65535": 65535, "0": 0, "00": 0, "080": 0, "65536": 0, "-1": 0, "+1": 0, "": 0, "1e3": 0, "99999": 0, "123456": 0, " 80": 0} {
		got, ok := ParsePort(s)
		if got != want || ok != (want != 0) {
			t.Errorf("ParsePort(%q) = %d %v; want %d", s, got, ok, want)
		}
	}
}

func TestValidDomain(t *testing.T) {
	for d, want := range map[string]bool{"localhost": true, "preview.example.com": true, "preview.example.com.": true, "a-b.c": true,
		"": false, "*.example.com": false, "example.com:80": false, "http://x": false, "-a.com": false, "a..b": false, ".": false} {
		if ValidDomain(d) != want {
			t.Errorf("ValidDomain(%q) = %v", d, !want)
		}
	}
}

func TestLinks(t *testing.T) {
	s, err := NewSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSigner(bytes.Repeat([]byte{8}, 32))
	now := time.Unix(1_800_000_000, 0)
	c := Claims{Org: "acme", ID: id, Port: 8000, Expires: now.Add(time.Minute), Key: "key_0123456789abcdef"}
	tok := s.Mint(c)
	got, err := s.Verify(tok, id, 8000, now)
	if err != nil || got != (Claims{Org: "acme", ID: id, Port: 8000, Expires: c.Expires, Key: "key_0123456789abcdef"}) {
		t.Fatalf("Verify of a fresh link: %+v %v", got, err)
	}
	for name, tc := range map[string]struct {
		tok  string
		id   string
		port int
		at   time.Time
		want error
	}{
		"expired":       {tok, id, 8000, c.Expires, ErrExpired},
		"other port":    {tok, id, 8001, now, ErrElsewhere},
		"other sandbox": {tok, "sb_bbcdefghijklmnopqrstuvwxyz", 8000, now, ErrElsewhere},
		"other secret":  {other.Mint(c), id, 8000, now, ErrMalformed},
		"tampered org":  {retarget(t, tok, "globex"), id, 8000, now, ErrMalformed},
		"tampered key":  {rekey(t, tok, ""), id, 8000, now, ErrMalformed},
		"spv1":          {spv1(s, c), id, 8000, now, ErrMalformed},
		"truncated":     {tok[:len(tok)-2], id, 8000, now, ErrMalformed},
		"empty":         {"", id, 8000, now, ErrMalformed},
		"no prefix":     {strings.TrimPrefix(tok, tokenPrefix), id, 8000, now, ErrMalformed},
	} {
		if _, err := s.Verify(tc.tok, tc.id, tc.port, tc.at); err != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// retarget swaps the org in a token's payload, keeping its MAC.
func retarget(t *testing.T, tok, org string) string {
	t.Helper()
	rest := strings.TrimPrefix(tok, tokenPrefix)
	_, sig, _ := strings.Cut(rest, ".")
	s, _ := NewSigner(bytes.Repeat([]byte{9}, 32))
	forged := s.Mint(Claims{Org: org, ID: id, Port: 8000, Expires: time.Unix(1_900_000_000, 0)})
	payload, _, _ := strings.Cut(strings.TrimPrefix(forged, tokenPrefix), ".")
	return tokenPrefix + payload + "." + sig
}

// rekey swaps the minting key in a token's payload (here: drops it, as a
// holder wanting the link to outlive the key would), keeping its MAC.
func rekey(t *testing.T, tok, key string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(strings.TrimPrefix(tok, tokenPrefix), ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(string(raw), "\n")
	f[4] = key
	_, sig, _ := strings.Cut(strings.TrimPrefix(tok, tokenPrefix), ".")
	return tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(strings.Join(f, "\n"))) + "." + sig
}

// spv1 is a correctly signed token of the format before the minting key
// was in it: it names no key to check, so it must not be taken.
func spv1(s *Signer, c Claims) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(strings.Join([]string{c.Org, c.ID, "8000", strconv.FormatInt(c.Expires.Unix(), 10)}, "\n")))
	return "spv1." + payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != keySize {
		t.Fatalf("key file: %v %v", st, err)
	}
	b, err := LoadKey(dir) // the second start reads the same secret
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok := a.Mint(Claims{Org: "acme", ID: id, Port: 1, Expires: now.Add(time.Hour)})
	if _, err := b.Verify(tok, id, 1, now); err != nil {
		t.Errorf("a link minted before a restart: %v", err)
	}
	os.WriteFile(filepath.Join(dir, KeyFile), []byte("short"), 0o600)
	if _, err := LoadKey(dir); err == nil {
		t.Error("a short key file was accepted")
	}
}

// FuzzParseHost: any Host header parses without panicking, and what it
// accepts is exactly the canonical name of what it returned.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"8000-" + id + ".localhost:8080", "localhost", "[::1]:80", "8000-" + id + ".LOCALHOST.", "1-sb_.x", "2-" + label + ".localhost", "3-sb-.x", ":", "-.", "65535-" + id + ".a.b"} {
		f.Add(s, "localhost")
	}
	f.Fuzz(func(t *testing.T, host, domain string) {
		port, got, ok := ParseHost(host, domain)
		if !ok {
			if port != 0 || got != "" {
				t.Fatalf("refused but returned %d %q", port, got)
			}
			return
		}
		if port < 1 || port > 65535 || len(got) != len(id) {
			t.Fatalf("accepted %q as %d %q", host, port, got)
		}
		if h := Host(port, got, "localhost", ""); !ValidDomain(h) {
			t.Fatalf("the canonical name %q of %q is not a DNS name", h, host)
		}
		p2, id2, ok2 := ParseHost(Host(port, got, strings.ToLower(domain), ""), domain)
		if !ok2 || p2 != port || id2 != got {
			t.Fatalf("the canonical name of %q does not parse back: %d %q %v", host, p2, id2, ok2)
		}
	})
}

// FuzzParsePort: a port parses back to its own text.
func FuzzParsePort(f *testing.F) {
	for _, s := range []string{"1", "8000", "65535", "0", "080", "99999", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParsePort(s)
		if ok && (p < 1 || p > 65535 || s != strings.TrimLeft(s, "0") || len(s) > 5) {
			t.Fatalf("ParsePort(%q) = %d", s, p)
		}
	})
}

// FuzzVerify: no token text panics the parser or passes without the MAC.
func FuzzVerify(f *testing.F) {
	s, _ := NewSigner(bytes.Repeat([]byte{7}, 32))
	now := time.Unix(1_800_000_000, 0)
	f.Add(s.Mint(Claims{Org: "acme", ID: id, Port: 8000, Expires: now.Add(time.Minute)}))
	f.Add(s.Mint(Claims{Org: "acme", ID: id, Port: 8000, Expires: now.Add(time.Minute), Key: "key_0123456789abcdef"}))
	f.Add("spv2..")
	f.Add("spv2.YQ.YQ")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := s.Parse(tok, now)
		if err == nil && s.Mint(c) != tok {
			t.Fatalf("%q verified but is not the token of its claims %+v", tok, c)
		}
	})
}

func TestHostOnlyCookie(t *testing.T) {
	for in, want := range map[string]string{
		"a=1":                   "a=1",
		"a=1; Path=/; HttpOnly": "a=1; Path=/; HttpOnly",
		"a=1; Domain=preview.example.com; Path=/": "a=1; Path=/",
		"a=1;domain=.example.com":                 "a=1",
		"a=1; DOMAIN = x; Secure":                 "a=1; Secure",
		"a=1; \tDomain=x;Domain=y; Max-Age=5":     "a=1; Max-Age=5",
		"a=1; Domain":                             "a=1",
		"domain=1; Path=/":                        "domain=1; Path=/", // the cookie's own name stays
		"a=domain=x; Path=/":                      "a=domain=x; Path=/",
		"a=1; Path=/domain":                       "a=1; Path=/domain",
		"a=1; Domainx=y":                          "a=1; Domainx=y",
	} {
		if got := HostOnlyCookie(in); got != want {
			t.Errorf("HostOnlyCookie(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzHostOnlyCookie: whatever an app sends, no attribute a browser (or
// net/http) would read as Domain is left, the cookie's name and value are
// untouched, and a second pass changes nothing.
func FuzzHostOnlyCookie(f *testing.F) {
	for _, s := range []string{"a=1; Domain=example.com; Path=/", "a=1;domain=.x", "a=1; \tDoMaIn = x", "a", ";;;", "a=1; Domain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		out := HostOnlyCookie(line)
		parts := strings.Split(out, ";")
		if parts[0] != strings.Split(line, ";")[0] {
			t.Fatalf("the name=value of %q changed: %q", line, out)
		}
		for _, a := range parts[1:] {
			name, _, _ := strings.Cut(a, "=")
			if strings.EqualFold(strings.Trim(name, " \t"), "domain") {
				t.Fatalf("%q kept a Domain attribute: %q", line, out)
			}
		}
		if HostOnlyCookie(out) != out {
			t.Fatalf("not idempotent on %q: %q", line, out)
		}
		res := http.Response{Header: http.Header{"Set-Cookie": {out}}}
		for _, c := range res.Cookies() {
			if c.Domain != "" {
				t.Fatalf("net/http reads Domain %q in %q (from %q)", c.Domain, out, line)
			}
		}
	})
}
