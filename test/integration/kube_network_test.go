package integration_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// linkLocal is the host interface's fe80:: address. It has one once a
// pod's link is on it (the kernel gives a bridge its address with its
// carrier; kube-up leaves IPv6 on, and guards it): none fails the test,
// whose IPv6 probes would prove nothing without it.
func linkLocal(t *testing.T, name string) string {
	t.Helper()
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatalf("the pods' bridge: %v", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatalf("the addresses of %s: %v", name, err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() == nil && ip.IP.IsLinkLocalUnicast() {
			return ip.IP.String()
		}
	}
	t.Fatalf("%s has no IPv6 link-local address (%v): nothing to probe over IPv6", name, addrs)
	return ""
}

// TestKubeAPINetwork: a lease's network and PUT …/network on the kube
// backend, through the API, on the real test cluster with
// kube-network-policies enforcing, against the test's own routed internet.
// (The runtime's full matrix is internal/runtime/kube's TestKubeEgressEnforced.)
func TestKubeAPINetwork(t *testing.T) {
	cfg := server.Config{}
	cfg.Service.NetworkAllow = []string{"198.51.100.0/24", "203.0.113.0/24", "internet", "*"}
	e, c, ns := newKubeEnvConfig(t, cfg)
	testenv.NewRoutedInternet(t)
	get := func(id, url string) string {
		t.Helper()
		a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c",
			"import sys,urllib.request\ntry: print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode(), end='')\nexcept Exception as e: sys.exit(1)", url}})
		return a.Stdout
	}

	id := e.lease("acme", map[string]any{"ttlSec": 300, "network": map[string]any{"allow": []string{"198.51.100.0/24"}, "ports": []int{80}}})
	if got := get(id, "http://"+testenv.RoutedA+"/"); !strings.HasPrefix(got, "internet ") {
		t.Errorf("allowed CIDR from a leased policy: %q", got)
	}
	if got := get(id, "http://"+testenv.RoutedA+":8080/"); got != "" {
		t.Errorf("a port the lease did not allow answered %q", got)
	}
	if got := get(id, "http://"+testenv.RoutedB+"/"); got != "" {
		t.Errorf("a CIDR the lease did not allow answered %q", got)
	}
	nps, err := c.NetworkingV1().NetworkPolicies(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "sandbox.dev/id=" + id})
	if err != nil || len(nps.Items) != 1 {
		t.Fatalf("the sandbox's NetworkPolicies: %v %v", nps, err)
	}

	// Changed live: new connections follow.
	e.must(http.StatusOK, "PUT", "/v1/sandbox/"+id+"/network", "acme", map[string]any{"allow": []string{testenv.RoutedB}})
	deadline := time.Now().Add(15 * time.Second)
	for get(id, "http://"+testenv.RoutedB+"/") == "" && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if got := get(id, "http://"+testenv.RoutedB+"/"); !strings.HasPrefix(got, "internet ") {
		t.Errorf("after PUT network: %q", got)
	}
	if got := get(id, "http://"+testenv.RoutedA+"/"); got != "" {
		t.Errorf("after PUT network the old CIDR still answers %q", got)
	}

	// Domain rules: refused by this backend (501). The backend's error says
	// why (kube.CheckNetwork); the service does not pass that sentence on
	// yet, so only the status is checked here.
	r := e.do("PUT", "/v1/sandbox/"+id+"/network", "acme", map[string]any{"allow": []string{"pypi.org"}})
	if r.Status != http.StatusNotImplemented {
		t.Errorf("a domain rule on kube: %d %s", r.Status, r.Body)
	}

	// The cluster's own services stay out of reach, even for a sandbox with
	// the whole internet: the apiserver through the kubernetes Service
	// (kube-proxy routes it to the host, where kube-netpol judges it), the
	// apiserver's own address, and the cluster DNS.
	open := func(id, host string, port int) bool {
		t.Helper()
		a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c",
			"import socket,sys\n" +
				"try:\n f,ty,_,_,a=socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), 0, socket.SOCK_DGRAM if sys.argv[3]=='udp' else socket.SOCK_STREAM)[0]\n s=socket.socket(f, ty)\n s.settimeout(3)\n s.connect(a)\n if sys.argv[3]=='udp':\n  s.send(bytes.fromhex('abcd010000010000000000000a6b756265726e657465730764656661756c740373766307636c7573746572056c6f63616c0000010001')); s.recv(512)\n print('open')\nexcept Exception: print('shut')",
			host, strconv.Itoa(port), map[bool]string{true: "udp", false: "tcp"}[port == 53]}})
		return strings.TrimSpace(a.Stdout) == "open"
	}
	wide := e.lease("acme", map[string]any{"ttlSec": 300, "network": map[string]any{"allow": []string{"internet"}}})
	if got := get(wide, "http://"+testenv.RoutedA+"/"); !strings.HasPrefix(got, "internet ") {
		t.Errorf("a sandbox with the internet does not reach it: %q", got)
	}
	if !open(wide, testenv.RoutedA, 80) {
		t.Fatal("the probe does not see an open port the sandbox may reach")
	}
	for _, to := range []struct {
		host string
		port int
	}{{"10.96.0.1", 443}, {"10.244.0.1", 6443}, {"10.244.0.1", 10250}, {"10.96.0.10", 53}} {
		for _, sb := range []string{id, wide} {
			if open(sb, to.host, to.port) {
				t.Errorf("sandbox %s reaches the cluster's %s:%d", sb, to.host, to.port)
			}
		}
	}
	// Nor over IPv6: the pods' bridge and each pod's interface (gVisor's
	// copy of it too) have link-local addresses, and the apiserver and the
	// kubelet listen on [::]. The host's end of the bridge, and the other
	// sandbox's own address (read inside it), on a port it listens on.
	gw := linkLocal(t, "sbxkube0")
	for _, port := range []int{6443, 10250} {
		if open(wide, gw+"%eth0", port) {
			t.Errorf("a sandbox reaches the host's [%s]:%d over IPv6", gw, port)
		}
	}
	e.sh("acme", id, "nohup python3 -m http.server -b :: 8000 >/dev/null 2>&1 &")
	peer := strings.TrimSpace(e.sh("acme", id, `python3 -c "
for l in open('/proc/net/if_inet6'):
    f = l.split()
    if f[0].startswith('fe80') and f[5] != 'lo':
        print(':'.join(f[0][i:i+4] for i in range(0, 32, 4))); break"`))
	if peer == "" {
		t.Fatalf("the sandbox has no IPv6 link-local address (/proc/net/if_inet6: %q): the probe of a peer over IPv6 would prove nothing",
			e.sh("acme", id, "cat /proc/net/if_inet6"))
	}
	deadline = time.Now().Add(10 * time.Second)
	for !open(id, "::1", 8000) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if !open(id, "::1", 8000) {
		t.Fatal("the peer's own server does not answer inside it")
	}
	if open(wide, peer+"%eth0", 8000) {
		t.Errorf("a sandbox reaches another's [%s]:8000 over IPv6", peer)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+wide, "acme", nil)

	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	if nps, err := c.NetworkingV1().NetworkPolicies(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "sandbox.dev/id=" + id}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(nps.Items) != 0 {
		t.Errorf("%d NetworkPolicies left after end", len(nps.Items))
	}
}

// TestKubeAPINetworkNames: domain rules through the API on the kube
// backend with its egress gateway (the runner image given): leased and
// changed live, answered like the gVisor backend's. (The runtime's full
// matrix is internal/runtime/kube's TestKubeEgressNames.)
func TestKubeAPINetworkNames(t *testing.T) {
	cfg := server.Config{}
	cfg.Service.NetworkAllow = []string{"*", "internet"}
	cfg.Kube.RunnerImage = testenv.RunnerImage(t)
	cfg.Kube.GatewayDNS = testenv.RoutedDNS
	e, _, _ := newKubeEnvConfig(t, cfg)
	testenv.NewRoutedInternet(t)
	get := func(id, url string) string {
		t.Helper()
		a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c",
			"import sys,urllib.request\ntry: print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode(), end='')\nexcept Exception as e: sys.exit(1)", url}})
		return a.Stdout
	}
	id := e.lease("acme", map[string]any{"ttlSec": 300, "network": map[string]any{"allow": []string{"allowed.example"}}})
	if got := get(id, "http://allowed.example/"); got != "internet "+testenv.RoutedB+":80 allowed.example" {
		t.Errorf("an allowed name: %q", got)
	}
	for _, u := range []string{"http://other.example/", "http://" + testenv.RoutedB + "/"} {
		if got := get(id, u); got != "" {
			t.Errorf("%s answered %q", u, got)
		}
	}
	e.must(http.StatusOK, "PUT", "/v1/sandbox/"+id+"/network", "acme", map[string]any{"allow": []string{"other.example"}})
	deadline := time.Now().Add(15 * time.Second)
	for get(id, "http://other.example/") == "" && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if got := get(id, "http://other.example/"); got != "internet "+testenv.RoutedB+":80 other.example" {
		t.Errorf("after PUT network: %q", got)
	}
	if got := get(id, "http://allowed.example/"); got != "" {
		t.Errorf("after PUT network the old name still answers %q", got)
	}
	r := e.do("PUT", "/v1/sandbox/"+id+"/network", "acme", map[string]any{"allow": []string{"internet"}, "deny": []string{"raw.example"}})
	if r.Status != http.StatusNotImplemented || !strings.Contains(string(r.Body), "raw.example") {
		t.Errorf("a name denied inside internet on kube: %d %s", r.Status, r.Body)
	}
}

// TestKubeRecoverAppliesNetwork: a lease cut by a restart after its pod
// ran but before its NetworkPolicy was made (the policy comes after the
// pod) is completed at recovery with the row's policy: its sandbox reaches
// what the lease allowed, not nothing.
func TestKubeRecoverAppliesNetwork(t *testing.T) {
	cfg := server.Config{}
	cfg.Service.NetworkAllow = []string{"198.51.100.0/24"}
	e, c, ns := newKubeEnvConfig(t, cfg)
	testenv.NewRoutedInternet(t)
	ctx := sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: "acme", Subject: "test"})

	// The row as the lease writes it before the start, and the pod as the
	// start made it before the cut: no policy yet.
	now := time.Now().UTC()
	sb := &sandbox.Sandbox{ID: sandbox.NewID(), Org: "acme", Class: "exec", Status: sandbox.StatusPending, Image: "exec", Runtime: "gvisor",
		Workdir: "/mnt/data", Name: sandbox.NewName(), CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(time.Hour),
		Network: &sandbox.NetworkPolicy{Allow: []string{"198.51.100.0/24"}, Ports: []int{80}}}
	sb.Volume = "scratch-" + sb.ID
	if err := e.srv.Store.Insert(ctx, sb, nil); err != nil {
		t.Fatal(err)
	}
	obj, err := e.srv.Runtime.Create(ctx, runtime.Spec{
		Name: sb.Name, Labels: map[string]string{runtime.LabelSandbox: sb.ID, runtime.LabelOrg: sandbox.Slug("acme")},
		Image: "exec", Runtime: "gvisor", Workdir: sb.Workdir, Volume: runtime.Volume{Name: sb.Volume, Scratch: true, SizeMiB: 64},
		CPUs: 0.5, MemoryMiB: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	nps, err := c.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: "sandbox.dev/id=" + sb.ID})
	if err != nil || len(nps.Items) != 0 {
		t.Fatalf("before recovery the pod has a policy: %v %v", nps, err)
	}

	res, err := e.srv.Service.Recover(ctx, map[string]runtime.Object{obj.Name: obj})
	if err != nil || res.Adopted != 1 {
		t.Fatalf("recover: %+v %v", res, err)
	}
	if nps, err = c.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: "sandbox.dev/id=" + sb.ID}); err != nil || len(nps.Items) != 1 {
		t.Fatalf("after recovery the sandbox's NetworkPolicies: %v %v", nps, err)
	}
	get := func() string {
		a := e.exec("acme", sb.ID, map[string]any{"argv": []string{"python3", "-c",
			"import sys,urllib.request\ntry: print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode(), end='')\nexcept Exception as e: sys.exit(1)", "http://" + testenv.RoutedA + "/"}})
		return a.Stdout
	}
	deadline := time.Now().Add(15 * time.Second)
	got := get()
	for !strings.HasPrefix(got, "internet ") && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		got = get()
	}
	if !strings.HasPrefix(got, "internet ") {
		t.Errorf("the recovered sandbox does not reach what its lease allowed: %q", got)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+sb.ID, "acme", nil)
}
