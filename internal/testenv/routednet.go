package testenv

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/egress"
)

// RoutedInternet is a test's own small internet for the kube test cluster,
// whose pods are routed from the host (Internet is for a server given an
// uplink namespace): one network namespace with a veth to the host, its end
// RoutedA/24 (198.51.100.0/24) with RoutedB and RoutedC (203.0.113.0/24)
// on it too, HTTP servers on :80 and :8080 answering "internet ADDR". The
// host's end is RoutedHost/24, a host address inside the range, and the
// host routes RoutedB and RoutedC (only those: deb.debian.org may be
// 203.0.113.80 here) through it. The host guard of
// scripts/kube-up.sh forwards pod traffic only to interfaces named sbxt*
// (this one's), so nothing leaves the machine whatever a policy says.
// 192.0.2.0/24 is not used: on this project's VMs it is the real uplink.
//
// RoutedDNS (RoutedA:53) is its DNS server, which answers RoutedZone and
// records each name it was asked (Queries); its web hosts answer on 80 and
// 8080, and over TLS (a self-signed certificate) on 443, with "internet",
// the address they were reached at, and the request's Host.
type RoutedInternet struct {
	NS, HostIf string

	mu      sync.Mutex
	queries []string
	paths   // extra paths of the web hosts, 80, 8080 and 443 (Handle)
}

// RoutedDNS is the routed internet's DNS server.
const RoutedDNS = RoutedA + ":53"

// RoutedZone is what RoutedDNS answers (an A record each, for 30 s; every
// other name does not exist).
var RoutedZone = map[string]string{
	"allowed.example.":     RoutedB,
	"www.allowed.example.": RoutedB,
	"other.example.":       RoutedB, // behind the allowed name's address
	"raw.example.":         RoutedC,
	"rebind.example.":      MetadataIP, // a public name pointing inside
	"private.example.":     PrivateIP,
}

// Queries are the names RoutedDNS was asked, in order.
func (n *RoutedInternet) Queries() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.queries)
}

func (n *RoutedInternet) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	if len(req.Question) == 1 {
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		n.mu.Lock()
		n.queries = append(n.queries, name)
		n.mu.Unlock()
		ip, ok := RoutedZone[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(ip)}}
		}
	}
	w.WriteMsg(m)
}

// Addresses of the routed internet.
const (
	RoutedHost = "198.51.100.1" // the host's end
	RoutedA    = "198.51.100.10"
	RoutedB    = "203.0.113.10"
	RoutedC    = "203.0.113.20"
)

// hostRoutesLock takes the lock of this host's routes to the test
// internets' addresses until the test's end: they are the machine's, one
// set at a time, so tests of two packages (run in parallel) take turns.
func hostRoutesLock(t testing.TB) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "sandbox-routed-internet.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // after the routes' cleanup: cleanups run last-added first
}

// NewRoutedInternet builds it; everything goes at the test's end.
func NewRoutedInternet(t testing.TB) *RoutedInternet {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, Kube, "root, for the test's network namespace")
	}
	hostRoutesLock(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	n := &RoutedInternet{NS: "sbxt-" + id, HostIf: "sbxt" + id + "h"}
	peer := "sbxt" + id + "n"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", n.NS)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", n.HostIf).Run()
		exec.Command("ip", "netns", "del", n.NS).Run()
	})
	run("link", "add", n.HostIf, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", n.NS)
	run("addr", "add", RoutedHost+"/24", "dev", n.HostIf)
	run("link", "set", n.HostIf, "up")
	// Host routes for its two addresses only, never the /24: this
	// machine's package mirror may live on another address of it.
	for _, a := range []string{RoutedB, RoutedC} {
		run("route", "add", a+"/32", "via", RoutedA, "dev", n.HostIf)
	}
	run("-n", n.NS, "link", "set", "lo", "up")
	run("-n", n.NS, "addr", "add", RoutedA+"/24", "dev", peer)
	run("-n", n.NS, "addr", "add", RoutedB+"/32", "dev", peer)
	run("-n", n.NS, "addr", "add", RoutedC+"/32", "dev", peer)
	run("-n", n.NS, "link", "set", peer, "up")
	run("-n", n.NS, "route", "add", "default", "via", RoutedHost)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := n.handler(r.URL.Path); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		fmt.Fprintf(w, "internet %s %s", r.Context().Value(http.LocalAddrContextKey), r.Host)
	}), ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}}
	t.Cleanup(func() { srv.Close() })
	ns := "/run/netns/" + n.NS
	for _, port := range []string{"80", "8080"} {
		go srv.Serve(listen(t, ns, "tcp4", ":"+port))
	}
	go srv.ServeTLS(listen(t, ns, "tcp4", ":443"), "", "")
	var pc net.PacketConn
	if err := egress.InNetNS(ns, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", RoutedDNS)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(n.serveDNS)}
	tcp := &dns.Server{Listener: listen(t, ns, "tcp4", RoutedDNS), Handler: dns.HandlerFunc(n.serveDNS)}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	// The host reaches it: a refusal in a test is the policy's, not a
	// broken test network.
	for _, a := range []string{RoutedA, RoutedB, RoutedC} {
		resp, err := http.Get("http://" + a + "/")
		if err != nil {
			t.Fatalf("the test internet does not answer the host at %s: %v", a, err)
		}
		resp.Body.Close()
	}
	return n
}

// RoutedRegistry is the address of the routed internet's registry
// (Registry): a private one, as a registry on a cluster's own network
// would have, so that go-containerregistry — the server's puller, in a pod
// or not — speaks plain HTTP to it as it does to any registry on an
// RFC 1918 address. The host routes this /32 alone through the veth.
const RoutedRegistry = "10.99.255.10"

// Registry starts a real registry (Debian's docker-registry) in the routed
// internet at RoutedRegistry:5000, which the cluster's pods and its node
// reach, and tells the node's containerd (the cluster under kubeRoot, whose
// containerd reads registry hosts from ROOT/etc/certs.d: scripts/kube-up.sh)
// to pull from it over plain HTTP. Everything goes at the test's end.
func (n *RoutedInternet) Registry(t testing.TB, kubeRoot string) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		Missing(t, RegistryPart, "docker-registry (Debian's package; scripts/deps.sh installs it for the tests)")
	}
	certs := filepath.Join(kubeRoot, "etc", "certs.d")
	if _, err := os.Stat(certs); err != nil {
		t.Fatalf("the cluster's containerd reads no registry hosts (%v): scripts/kube-up.sh sets its config_path", err)
	}
	for _, args := range [][]string{
		{"-n", n.NS, "addr", "add", RoutedRegistry + "/32", "dev", n.peer()},
		{"route", "add", RoutedRegistry + "/32", "via", RoutedA, "dev", n.HostIf},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "route", "del", RoutedRegistry+"/32").Run() })
	addr := RoutedRegistry + ":5000"
	hosts := filepath.Join(certs, addr)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hosts) })
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+addr, "http://"+addr)
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := startRegistry(t, exec.Command("ip", "netns", "exec", n.NS, bin), addr, t.TempDir(), ""); err != nil {
		t.Fatal(err)
	}
	return &Registry{Host: addr}
}

// peer is the name of the veth's end in the namespace.
func (n *RoutedInternet) peer() string { return strings.TrimSuffix(n.HostIf, "h") + "n" }
