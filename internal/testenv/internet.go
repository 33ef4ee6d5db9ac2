package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/egress"
)

// Internet is a test's own small internet: two network namespaces it
// made, nothing else. Uplink is where a server under test sends its
// sandboxes' traffic (--egress-uplink); World, reached from Uplink over a
// veth, holds the hosts, all on documentation addresses (and decoys on
// the ranges no policy may reach, so that a wrong rule would be seen
// reaching them, still inside this namespace):
//
//   - 203.0.113.10: HTTP (80) and HTTPS (443, any SNI) answering "hello
//     HOST" — the address of allowed.example and other.example alike;
//   - 203.0.113.20: the same, named by no name (raw-IP access);
//   - 203.0.113.30: the same, the address of x.example alone (a name a
//     policy denies, with an address no other name shares), and the end
//     of alias.example's CNAME;
//   - UDP 443 of the three: an echo (QUIC's port, traffic no proxy sees);
//   - 203.0.113.53: a DNS server for *.example that records every query
//     (on 53, and on 853 over TCP as a stand-in for DNS over TLS), with
//     hostile zones for the sandboxes' resolver's bounds: every name under
//     many.example has 500 addresses, no name under silent.example is
//     ever answered, and mixed.example's answer carries every kind of
//     record (see serveDNS);
//   - 169.254.169.254 and 10.9.9.9: decoys (metadata, a private host);
//   - HostPort on every Uplink address: a stand-in for the control API
//     on the host's addresses.
//
// Nothing here routes to this machine's other networks or beyond.
type Internet struct {
	Uplink   string // the uplink namespace's path
	World    string
	HostPort int
	DNS      string // 203.0.113.53:53

	mu      sync.Mutex
	queries []string // every name the world's DNS server was asked
	paths            // the web hosts' extra paths (Handle)
}

// paths are a test web host's extra handlers, by path prefix: a test's
// package index, registry or git server.
type paths struct {
	pmu sync.Mutex
	m   map[string]http.Handler
}

// Handle serves h on the web hosts for every path under prefix.
func (p *paths) Handle(prefix string, h http.Handler) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if p.m == nil {
		p.m = map[string]http.Handler{}
	}
	p.m[prefix] = h
}

// handler is the extra handler of path, if any.
func (p *paths) handler(path string) http.Handler {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	for prefix, h := range p.m {
		if strings.HasPrefix(path, prefix) {
			return h
		}
	}
	return nil
}

// Addresses of the test internet.
const (
	WebIP      = "203.0.113.10"
	RawIP      = "203.0.113.20"
	XIP        = "203.0.113.30"
	DNSIP      = "203.0.113.53"
	MetadataIP = "169.254.169.254"
	PrivateIP  = "10.9.9.9"
	UplinkIP   = "198.51.100.1"
)

// The world DNS server's hostile zones (see Internet).
const (
	ManyZone   = "many.example."
	SilentZone = "silent.example."
	ManyAddrs  = 500
)

// Zone is what the world's DNS server answers.
var Zone = map[string]string{
	"allowed.example.":     WebIP,
	"other.example.":       WebIP,
	"rebind.example.":      MetadataIP, // a public name pointing inside
	"private.example.":     PrivateIP,
	"raw.example.":         RawIP,
	"www.allowed.example.": WebIP,
	"x.example.":           XIP,
}

// Aliases are the CNAMEs the world's DNS server answers (with the
// target's address after them, as a recursive resolver does).
var Aliases = map[string]string{
	"alias.example.": "x.example.",
}

// NewInternet builds the namespaces and starts the hosts; everything goes
// at the test's end.
func NewInternet(t testing.TB) *Internet {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, GVisor, "root (the test makes network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		Missing(t, GVisor, "ip from iproute2")
	}
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	up, world := "sbt-up-"+id, "sbt-w-"+id
	in := &Internet{Uplink: "/run/netns/" + up, World: "/run/netns/" + world, HostPort: 18080, DNS: DNSIP + ":53"}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", up).Run()
		exec.Command("ip", "netns", "del", world).Run()
	})
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", up)
	run("netns", "add", world)
	run("-n", up, "link", "set", "lo", "up")
	run("-n", world, "link", "set", "lo", "up")
	run("-n", up, "link", "add", "wup0", "type", "veth", "peer", "name", "wld0", "netns", world)
	run("-n", up, "addr", "add", UplinkIP+"/24", "dev", "wup0")
	run("-n", world, "addr", "add", "198.51.100.2/24", "dev", "wld0")
	run("-n", up, "link", "set", "wup0", "up")
	run("-n", world, "link", "set", "wld0", "up")
	run("-n", up, "route", "add", "default", "via", "198.51.100.2")
	for _, a := range []string{WebIP, RawIP, XIP, DNSIP, MetadataIP, PrivateIP} {
		run("-n", world, "addr", "add", a+"/32", "dev", "lo")
	}
	in.start(t)
	return in
}

// NewHostInternet is an Internet whose uplink is this host's own network
// namespace (Uplink is empty: a server's default, no --egress-uplink), for
// the egress rules as they run there. The world namespace hangs off a veth
// from this namespace, its host end UplinkIP/24 (198.51.100.0/24, a
// documentation range), and this namespace routes only WebIP, RawIP and
// DNSIP (203.0.113.0/24, another one) through it: /32 routes, never a
// default or a wider range, so nothing a sandbox sends leaves the machine
// for the hosts a test names, and the decoys are not routed at all (the
// tests through an uplink namespace cover them). The stand-in control API
// listens on UplinkIP:HostPort here. Tests that add routes of this
// namespace take turns with RoutedInternet (one lock).
func NewHostInternet(t testing.TB) *Internet {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, GVisor, "root (the test makes network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		Missing(t, GVisor, "ip from iproute2")
	}
	hostRoutesLock(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	world, hostIf := "sbt-w-"+id, "sbtw"+id
	in := &Internet{World: "/run/netns/" + world, HostPort: 18080, DNS: DNSIP + ":53"}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", world)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", world).Run()
	})
	run("-n", world, "link", "set", "lo", "up")
	run("link", "add", hostIf, "type", "veth", "peer", "name", "wld0", "netns", world)
	run("addr", "add", UplinkIP+"/24", "dev", hostIf)
	run("-n", world, "addr", "add", "198.51.100.2/24", "dev", "wld0")
	run("link", "set", hostIf, "up")
	run("-n", world, "link", "set", "wld0", "up")
	run("-n", world, "route", "add", "default", "via", UplinkIP)
	for _, a := range []string{WebIP, RawIP, XIP, DNSIP, MetadataIP, PrivateIP} {
		run("-n", world, "addr", "add", a+"/32", "dev", "lo")
	}
	for _, a := range []string{WebIP, RawIP, DNSIP} {
		run("route", "add", a+"/32", "via", "198.51.100.2", "dev", hostIf)
	}
	in.start(t)
	return in
}

// listen listens in the namespace at ns ("": this one) until the test's
// end.
func listen(t testing.TB, ns, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	fn := func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	}
	var err error
	if ns == "" {
		err = fn()
	} else {
		err = egress.InNetNS(ns, fn)
	}
	if err != nil {
		t.Fatalf("listen %s in %q: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// start starts the world's hosts and the stand-in control API.
func (in *Internet) start(t testing.TB) {
	t.Helper()
	cert := selfSigned(t)
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := in.handler(r.URL.Path); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		// /bytes/N: N zero bytes, for throughput.
		if n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64); err == nil && n > 0 && n <= 1<<30 {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			buf := make([]byte, 64<<10)
			for n > 0 {
				k := min(n, int64(len(buf)))
				if _, err := w.Write(buf[:k]); err != nil {
					return
				}
				n -= k
			}
			return
		}
		fmt.Fprintf(w, "hello %s\n", r.Host)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 5 * time.Second}
	listen := func(ns, network, addr string) net.Listener { return listen(t, ns, network, addr) }
	for _, ip := range []string{WebIP, RawIP, XIP, MetadataIP, PrivateIP} {
		go web.Serve(listen(in.World, "tcp4", ip+":80"))
		go web.ServeTLS(listen(in.World, "tcp4", ip+":443"), "", "")
	}
	// A UDP echo on 443 (QUIC's port) of the web hosts: traffic that
	// never meets the proxy.
	for _, ip := range []string{WebIP, RawIP, XIP} {
		var pc net.PacketConn
		if err := egress.InNetNS(in.World, func() error {
			var err error
			pc, err = net.ListenPacket("udp4", ip+":443")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(buf[:n], from)
			}
		}()
	}
	// The stand-in control API, on every uplink address.
	host := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "the host's API")
	}), ReadHeaderTimeout: 5 * time.Second}
	if in.Uplink != "" {
		go host.Serve(listen(in.Uplink, "tcp4", fmt.Sprintf("0.0.0.0:%d", in.HostPort)))
		// and over IPv6 (link-local addresses included), which no
		// sandbox may reach.
		go host.Serve(listen(in.Uplink, "tcp6", fmt.Sprintf("[::]:%d", in.HostPort)))
	} else {
		go host.Serve(listen("", "tcp4", fmt.Sprintf("%s:%d", UplinkIP, in.HostPort)))
	}
	t.Cleanup(func() { web.Close(); host.Close() })

	var pc net.PacketConn
	if err := egress.InNetNS(in.World, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", in.DNS)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	dnsSrv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(in.serveDNS)}
	go dnsSrv.ActivateAndServe()
	tcpDNS := &dns.Server{Listener: listen(in.World, "tcp4", in.DNS), Handler: dns.HandlerFunc(in.serveDNS)}
	go tcpDNS.ActivateAndServe()
	dot := &dns.Server{Listener: listen(in.World, "tcp4", DNSIP+":853"), Handler: dns.HandlerFunc(in.serveDNS)}
	go dot.ActivateAndServe()
	t.Cleanup(func() { dnsSrv.Shutdown(); tcpDNS.Shutdown(); dot.Shutdown() })
}

func (in *Internet) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		in.mu.Lock()
		in.queries = append(in.queries, name)
		in.mu.Unlock()
		hdr := func(name string, t uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 30}
		}
		switch {
		case strings.HasSuffix(name, "."+SilentZone):
			return // never answered: the asker waits out its timeout
		case strings.HasSuffix(name, "."+ManyZone) && q.Qtype == dns.TypeA:
			for i := range ManyAddrs {
				ip := net.IPv4(203, 0, 113, byte(i))
				if i >= 250 {
					ip = net.IPv4(198, 51, 100, byte(i-250))
				}
				a := &dns.A{Hdr: hdr(q.Name, dns.TypeA), A: ip}
				a.Hdr.Ttl = 7 * 24 * 3600
				m.Answer = append(m.Answer, a)
			}
		case name == "mixed.example." && q.Qtype == dns.TypeA:
			// A CNAME chain to a name with one reachable address, one in
			// each never-reachable kind, and records of every other kind
			// that could carry an address or a name.
			const target = "mixed-target.example."
			m.Answer = append(m.Answer,
				&dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME), Target: target},
				&dns.A{Hdr: hdr(target, dns.TypeA), A: net.ParseIP(MetadataIP)},
				&dns.A{Hdr: hdr(target, dns.TypeA), A: net.ParseIP(WebIP)},
				&dns.A{Hdr: hdr(target, dns.TypeA), A: net.ParseIP(PrivateIP)},
				&dns.A{Hdr: hdr(target, dns.TypeA), A: net.ParseIP("168.63.129.16")},
				&dns.A{Hdr: hdr("other.example.", dns.TypeA), A: net.ParseIP(RawIP)},
				&dns.AAAA{Hdr: hdr(target, dns.TypeAAAA), AAAA: net.ParseIP("::1")},
				&dns.TXT{Hdr: hdr(target, dns.TypeTXT), Txt: []string{PrivateIP}},
				&dns.SRV{Hdr: hdr(target, dns.TypeSRV), Port: 80, Target: "private.example."},
				&dns.DNAME{Hdr: hdr(q.Name, dns.TypeDNAME), Target: "private.example."},
			)
			m.Ns = append(m.Ns, &dns.NS{Hdr: hdr("example.", dns.TypeNS), Ns: "ns.private.example."})
			m.Extra = append(m.Extra, &dns.A{Hdr: hdr("ns.private.example.", dns.TypeA), A: net.ParseIP("127.0.0.1")})
		case Aliases[name] != "":
			target := Aliases[name]
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME), Target: target})
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(target, dns.TypeA), A: net.ParseIP(Zone[target])})
			}
		default:
			if ip, ok := Zone[name]; ok && q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(q.Name, dns.TypeA), A: net.ParseIP(ip)})
			} else if !ok {
				m.Rcode = dns.RcodeNameError
			}
		}
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		m.Truncate(dns.MinMsgSize) // as a real server would: the rest over TCP
	}
	w.WriteMsg(m)
}

// Queries are the names the world's DNS server was asked so far.
func (in *Internet) Queries() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.queries...)
}

func selfSigned(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test internet"},
		DNSNames: []string{"allowed.example", "other.example"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
