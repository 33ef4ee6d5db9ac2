package egress

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// newTestGateway is a gateway on loopback: its resolver and one proxy port
// on free ports, asking a DNS server of the test's that answers zone. Its
// pods are the test's (Set), at 127.0.0.1: the sockets are real, the
// address is not a pod's. (What it connects on to is covered on the test
// cluster, internal/runtime/kube's TestKubeEgressNames: loopback is a
// range no sandbox reaches.)
func newTestGateway(t *testing.T, zone map[string]string) (*Gateway, string, uint16) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if ip, ok := zone[strings.ToLower(req.Question[0].Name)]; ok {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(ip)}}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})}
	go up.ActivateAndServe()
	t.Cleanup(func() { up.Shutdown() })
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dnsAddr := free.Addr().String()
	free.Close()
	proxyLn, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(proxyLn.Addr().(*net.TCPAddr).Port)
	proxyLn.Close()
	saved := GatewayPorts
	GatewayPorts = []uint16{port}
	defer func() { GatewayPorts = saved }()
	g, err := NewGateway(GatewayOptions{Self: netip.MustParseAddr("10.244.0.53"), DNS: pc.LocalAddr().String(), DNSAddr: dnsAddr}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g, dnsAddr, port
}

func policy(t *testing.T, p netpolicy.Policy) *netpolicy.Rules {
	t.Helper()
	r, err := netpolicy.Parse(&p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ask is one A query of name over UDP: the rcode and the addresses.
func ask(t *testing.T, server, name string) (int, []string) {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 5 * time.Second}
	r, _, err := c.Exchange(q, server)
	if err != nil {
		t.Fatalf("asking %s: %v", name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return r.Rcode, out
}

// TestGatewayResolver: a pod is answered what its policy resolves; a name
// allowed by name points at the gateway, "internet" at the addresses
// themselves less the never ranges; a pod of no policy, and an address the
// gateway does not know, get nothing.
func TestGatewayResolver(t *testing.T) {
	g, server, _ := newTestGateway(t, map[string]string{
		"allowed.example.": "203.0.113.10", "other.example.": "203.0.113.20", "rebind.example.": "169.254.169.254",
	})
	me := netip.MustParseAddr("127.0.0.1")

	// Unknown: refused, after the wait for the watcher.
	start := time.Now()
	if rc, _ := ask(t, server, "allowed.example"); rc != dns.RcodeRefused {
		t.Errorf("an unknown address: rcode %d", rc)
	}
	if d := time.Since(start); d < waitUnknown-time.Second {
		t.Errorf("refused after %v: it did not wait for the watcher", d)
	}
	// Learned while waiting: answered.
	go func() { time.Sleep(200 * time.Millisecond); g.Set("sbx-a", me, nil) }()
	if rc, _ := ask(t, server, "allowed.example"); rc != dns.RcodeNameError {
		t.Errorf("a pod of no policy: rcode %d, want NXDOMAIN", rc)
	}

	g.Set("sbx-a", me, policy(t, netpolicy.Policy{Allow: []string{"allowed.example", "rebind.example"}}))
	for name, want := range map[string]string{"allowed.example": "[10.244.0.53]", "rebind.example": "[]", "other.example": "[]"} {
		if _, got := ask(t, server, name); strings.Join(got, " ") != strings.Trim(want, "[]") {
			t.Errorf("names: %s = %v, want %s", name, got, want)
		}
	}
	if rc, _ := ask(t, server, "other.example"); rc != dns.RcodeNameError {
		t.Errorf("a name not allowed: rcode %d", rc)
	}
	g.Set("sbx-a", me, policy(t, netpolicy.Policy{Allow: []string{"internet"}}))
	for name, want := range map[string]string{"allowed.example": "203.0.113.10", "rebind.example": "", "other.example": "203.0.113.20"} {
		if _, got := ask(t, server, name); strings.Join(got, " ") != want {
			t.Errorf("internet: %s = %v, want %q", name, got, want)
		}
	}
	g.Forget("sbx-a")
	if rc, _ := ask(t, server, "allowed.example"); rc != dns.RcodeRefused {
		t.Errorf("a forgotten pod: rcode %d", rc)
	}
}

// TestGatewayProxyRefuses: the proxy answers a plain-HTTP request for a
// name the pod's policy does not allow with 403, resets a TLS connection
// of such a name, and connects nowhere for a name allowed on another port.
func TestGatewayProxyRefuses(t *testing.T) {
	g, _, port := newTestGateway(t, map[string]string{"allowed.example.": "203.0.113.10"})
	g.Set("sbx-a", netip.MustParseAddr("127.0.0.1"), policy(t, netpolicy.Policy{Allow: []string{"allowed.example"}, Ports: []int{443}}))
	addr := "127.0.0.1:" + strconv.Itoa(int(port))
	for _, host := range []string{"other.example", "allowed.example"} { // the latter: not on this port
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host %s: %v %v, want 403", host, resp, err)
		}
		c.Close()
	}
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(clientHello(t, "other.example"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("TLS for another name: read %d bytes, want the connection closed", n)
	}
}
