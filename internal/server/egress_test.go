package server_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// probe runs checks inside a sandbox and prints one line per check: "ok
// <detail>" or "fail <error>". Each check fails fast (3 s) rather than
// hanging: a refused packet is answered (reset or ICMP) by the rules.
const probe = `
import json, socket, ssl, sys, urllib.request
def http(url, host=None):
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    with urllib.request.urlopen(req, timeout=3) as r:
        return r.read().decode().strip()
def https(addr, sni):
    ctx = ssl._create_unverified_context()
    with socket.create_connection((addr, 443), timeout=3) as s:
        with ctx.wrap_socket(s, server_hostname=sni) as t:
            t.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % sni).encode())
            return t.recv(4096).decode().split("\r\n\r\n", 1)[-1].strip()
def tcp(addr, port):
    # Reached means answered: under a policy with names the proxy takes
    # every connection first and drops the refused ones unanswered.
    with socket.create_connection((addr, port), timeout=3) as s:
        s.settimeout(3)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        line = s.recv(64).decode(errors="replace").split("\r\n")[0]
        if " 200 " not in line:
            raise ConnectionError("not the host's answer: %r" % line)
        return "answered " + line
def resolve(name):
    return socket.gethostbyname(name)
def udpdns(server, name):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(q, (server, 53))
    return "answered %d bytes" % len(s.recvfrom(512)[0])
def myip():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("203.0.113.10", 80))
    return s.getsockname()[0]
for check in json.loads(sys.argv[1]):
    try:
        print("ok", globals()[check[0]](*check[1:]))
    except Exception as e:
        print("fail", type(e).__name__, e)
`

// run runs the checks in id and returns each check's line.
func probeIn(e *env, org, id string, checks ...[]any) []string {
	e.t.Helper()
	raw, _ := json.Marshal(checks)
	a := e.exec(org, id, map[string]any{"argv": []string{"python3", "-c", probe, string(raw)}, "timeoutSec": 120})
	lines := strings.Split(strings.TrimSpace(a.Stdout), "\n")
	if a.ExitCode != 0 || len(lines) != len(checks) {
		e.t.Fatalf("probe exited %d: %s%s", a.ExitCode, a.Stdout, a.Stderr)
	}
	return lines
}

func c(args ...any) []any { return args }

// expect checks each probe line against want: a prefix "ok" (with the
// detail, if given) or "fail".
func expect(t *testing.T, what string, checks [][]any, got []string, want []string) {
	t.Helper()
	for i := range checks {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("%s: %v = %q, want %q", what, checks[i], got[i], want[i])
		}
	}
}

// newEgressEnv is a server whose sandboxes' egress uplink is the test's
// own internet.
func newEgressEnv(t testing.TB, rateMbit int) (*env, *testenv.Internet) {
	in := testenv.NewInternet(t)
	var cfg server.Config
	cfg.GVisor.Egress.RateMbit = rateMbit // 0: unbounded
	cfg.GVisor.Egress.Uplink = in.Uplink
	cfg.GVisor.Egress.DNS = in.DNS
	cfg.Service.NetworkAllow = []string{"*", "internet"}
	e := newEnvConfig(t, cfg)
	return e, in
}

// leftovers lists what the egress side has made in the uplink: sandbox
// links, per-sandbox chains, namespace mounts.
func leftovers(t *testing.T, e *env, in *testenv.Internet) []string {
	t.Helper()
	var out []string
	links, _ := exec.Command("ip", "-n", filepath.Base(in.Uplink), "-o", "link", "show").Output()
	for l := range strings.SplitSeq(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "sbx") {
			out = append(out, "link "+f[1])
		}
	}
	ents, _ := os.ReadDir(filepath.Join(e.data, "runtime", "netns"))
	for _, d := range ents {
		out = append(out, "netns "+d.Name())
	}
	return out
}

// TestEgressOnRunsc: the egress policy on the real runtime, against the
// test's own internet. Domains are enforced by name (resolver and SNI/Host
// proxy), addresses by rules; the host, metadata, private ranges,
// neighbours and other resolvers are never reached; a live change takes
// effect; nothing is left after the end.
func TestEgressOnRunsc(t *testing.T) {
	e, in := newEgressEnv(t, 0)

	named := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"allowed.example", "rebind.example"}}})
	got := e.must(200, "GET", "/v1/sandbox/"+named, "acme", nil).JSON(t)
	if n, _ := got["network"].(map[string]any); n == nil || fmt.Sprint(n["allow"]) != "[allowed.example rebind.example]" {
		t.Fatalf("the answer's network = %v", got["network"])
	}
	checks := [][]any{
		c("http", "http://allowed.example/"),
		c("https", "allowed.example", "allowed.example"),
		c("resolve", "other.example"),
		c("http", "http://203.0.113.10/"),                  // the allowed name's address, raw
		c("https", testenv.WebIP, "other.example"),         // allowed address, disallowed SNI
		c("http", "http://203.0.113.10/", "other.example"), // allowed address, disallowed Host
		c("http", "http://203.0.113.20/"),                  // an address of no allowed name
		c("resolve", "rebind.example"),                     // a public name pointing at metadata
		c("tcp", testenv.MetadataIP, 80),                   // cloud metadata
		c("tcp", testenv.PrivateIP, 80),                    // a private host
		c("tcp", testenv.UplinkIP, in.HostPort),            // the host's address and API port
		c("tcp", "10.254.0.1", in.HostPort),                // the resolver's address, another port
		c("tcp", "10.254.0.5", in.HostPort),                // the sandbox's own gateway
		c("udpdns", testenv.DNSIP, "allowed.example"),      // a resolver other than its own
		c("resolve", "c2VjcmV0.tunnel.example"),            // data out through its own resolver
	}
	want := []string{
		"ok hello allowed.example", "ok hello allowed.example", "fail",
		"fail", "fail", "fail", "fail",
		"fail", "fail", "fail", "fail", "fail", "fail", "fail", "fail",
	}
	expect(t, "allow allowed.example", checks, probeIn(e, "acme", named, checks...), want)
	if q := in.Queries(); slices.ContainsFunc(q, func(s string) bool { return strings.Contains(s, "tunnel") || strings.Contains(s, "other.example") }) {
		t.Errorf("a disallowed name reached the world's DNS server: %v", q)
	}

	// Addresses only: the CIDR and port, nothing by name.
	cidr := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{testenv.RawIP}, "ports": []int{80}}})
	checks = [][]any{
		c("http", "http://203.0.113.20/"),
		c("tcp", testenv.RawIP, 443),
		c("http", "http://203.0.113.10/"),
		c("resolve", "raw.example"),
		c("udpdns", testenv.DNSIP, "raw.example"),
	}
	expect(t, "allow 203.0.113.20 port 80", checks, probeIn(e, "acme", cidr, checks...), []string{"ok hello 203.0.113.20", "fail", "fail", "fail", "fail"})

	// The internet: every public address, still no neighbour and no host.
	inet := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"internet"}, "deny": []string{"other.example"}}})
	e.startProcess("acme", inet, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000"}})
	neighbour := strings.TrimPrefix(probeIn(e, "acme", inet, c("myip"))[0], "ok ")
	checks = [][]any{
		c("http", "http://203.0.113.20/"),
		c("http", "http://allowed.example/"),
		c("resolve", "other.example"),
		c("tcp", testenv.MetadataIP, 80),
		c("tcp", testenv.PrivateIP, 80),
		c("tcp", testenv.UplinkIP, in.HostPort),
	}
	expect(t, "internet", checks, probeIn(e, "acme", inet, checks...), []string{"ok hello 203.0.113.20", "ok hello allowed.example", "fail", "fail", "fail", "fail"})
	expect(t, "a neighbour", [][]any{c("tcp", neighbour, 8000)}, probeIn(e, "acme", cidr, c("tcp", neighbour, 8000)), []string{"fail"})
	// With no name rule nothing goes through the proxy: the rules alone.
	plain := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"internet"}}})
	checks = [][]any{
		c("http", "http://203.0.113.20/"),
		c("tcp", testenv.MetadataIP, 80),
		c("tcp", testenv.PrivateIP, 80),
		c("tcp", testenv.UplinkIP, in.HostPort),
		c("tcp", "10.254.0.1", in.HostPort),
		c("tcp", neighbour, 8000),
		c("udpdns", testenv.DNSIP, "allowed.example"),
		c("resolve", "allowed.example"),
	}
	expect(t, "internet, no names", checks, probeIn(e, "acme", plain, checks...), []string{"ok hello 203.0.113.20", "fail", "fail", "fail", "fail", "fail", "fail", "ok 203.0.113.10"})
	e.must(200, "DELETE", "/v1/sandbox/"+plain, "acme", nil)

	// No network: nothing at all.
	none := e.lease("acme", nil)
	checks = [][]any{c("http", "http://203.0.113.20/"), c("resolve", "allowed.example")}
	expect(t, "none", checks, probeIn(e, "acme", none, checks...), []string{"fail", "fail"})

	// A live change takes effect; closed reaches nothing; another org's
	// sandbox is a 404; a sandbox leased with none cannot be opened.
	// (through the typed op, the MCP tool's implementation)
	e.must(200, "POST", "/v1/sandbox/network", "acme", map[string]any{"id": named, "allow": []string{"other.example"}})
	checks = [][]any{c("http", "http://other.example/"), c("http", "http://allowed.example/")}
	expect(t, "changed to other.example", checks, probeIn(e, "acme", named, checks...), []string{"ok hello other.example", "fail"})
	e.must(200, "PUT", "/v1/sandbox/"+named+"/network", "acme", map[string]any{})
	expect(t, "closed", checks, probeIn(e, "acme", named, checks...), []string{"fail", "fail"})
	e.must(404, "PUT", "/v1/sandbox/"+named+"/network", "globex", map[string]any{})
	e.must(409, "PUT", "/v1/sandbox/"+none+"/network", "acme", map[string]any{"allow": []string{"internet"}})

	// Ended: its link, namespace and rules are gone.
	for _, id := range []string{named, cidr, inet, none} {
		e.must(200, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	}
	if l := leftovers(t, e, in); len(l) > 0 {
		t.Errorf("left after every end: %v", l)
	}
}

// ruleCount counts the rules of each per-sandbox chain in the uplink's
// table: a re-adoption must replace them, never add a second copy.
func ruleCount(t *testing.T, in *testenv.Internet) map[string]int {
	t.Helper()
	ns, err := netns.GetFromPath(in.Uplink)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != "sandbox" || ch.Hooknum != nil {
			continue
		}
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			t.Fatal(err)
		}
		out[ch.Name] = len(rules)
	}
	return out
}

// TestEgressRestartAndSweep: a restarted server adopts a live sandbox's
// network (it still works, its rules replaced rather than doubled); an
// orphaned container's network goes with it at the sweep; a namespace no
// container claims (a server killed mid-attach) is removed at the start.
func TestEgressRestartAndSweep(t *testing.T) {
	in := testenv.NewInternet(t)
	var cfg server.Config
	cfg.GVisor.Egress.Uplink, cfg.GVisor.Egress.DNS = in.Uplink, in.DNS
	cfg.Service.NetworkAllow = []string{"*"}
	e := newEnvConfig(t, cfg)
	id := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"allowed.example"}}})
	check := [][]any{c("http", "http://allowed.example/"), c("http", "http://other.example/")}
	expect(t, "before the restart", check, probeIn(e, "acme", id, check...), []string{"ok hello allowed.example", "fail"})
	before := ruleCount(t, in)
	if len(before) != 7 {
		t.Fatalf("per-sandbox chains: %v", before)
	}

	// An orphan: a container with a network that no row claims.
	orphanRules, _ := netpolicy.Parse(&netpolicy.Policy{Allow: []string{"internet"}})
	o, err := e.srv.Runtime.Create(t.Context(), runtime.Spec{
		Name: sandbox.NewName(), Labels: map[string]string{runtime.LabelSandbox: sandbox.NewID()}, Image: "exec",
		Workdir: "/mnt/data", Volume: runtime.Volume{Name: "scratch-orphan-" + sandbox.NewName(), Scratch: true}, Network: orphanRules,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A stray namespace, as a server killed between making it and
	// recording it would leave.
	stray := filepath.Join(e.data, "runtime", "netns", "00ff00ff00")
	if err := os.WriteFile(stray, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "--net="+stray, "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare: %v: %s", err, out)
	}

	e.http.Close()
	e.srv.Close()
	cfg.Data, cfg.Images, cfg.Runner, cfg.GVisor.Runsc = e.data, imagesDir(), runnerBin(t), gvisor.DefaultRunsc()
	srv, err := server.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.srv, e.http = srv, httptest.NewServer(srv.Handler)
	if _, err := os.Stat(stray); err == nil {
		t.Error("the stray namespace survived the start")
	}
	expect(t, "after the restart", check, probeIn(e, "acme", id, check...), []string{"ok hello allowed.example", "fail"})
	after := ruleCount(t, in)
	for ch, n := range after {
		if b, ok := before[ch]; ok && b != n {
			t.Errorf("chain %s had %d rules, %d after the restart", ch, b, n)
		}
	}
	if len(after) != 14 {
		t.Errorf("want the sandbox's and the orphan's 7 chains each: %v", after)
	}

	e.srv.Reaper.Grace = time.Nanosecond
	if n, err := e.srv.Reaper.Sweep(t.Context()); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	if got := ruleCount(t, in); len(got) != 7 {
		t.Errorf("after the sweep of the orphan %s: %v", o.Name, got)
	}
	e.must(200, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	if l := leftovers(t, e, in); len(l) > 0 || len(ruleCount(t, in)) != 0 {
		t.Errorf("left after the end: %v %v", l, ruleCount(t, in))
	}
}

// TestEgressAcrossSleepAndForkOnRunsc: a sandbox's network comes back
// with it — a paused sandbox (memory checkpointed, container and network
// gone) is woken into a new namespace with the same policy, and a fork
// gets a network of its own under the original's policy; both reach what
// the policy allows and nothing else, and both ends leave nothing.
func TestEgressAcrossSleepAndForkOnRunsc(t *testing.T) {
	e, in := newEgressEnv(t, 0)
	id := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"allowed.example"}}})
	checks := [][]any{c("http", "http://allowed.example/"), c("http", "http://other.example/"), c("tcp", testenv.RawIP, 80)}
	want := []string{"ok hello allowed.example", "fail", "fail"}
	expect(t, "before", checks, probeIn(e, "acme", id, checks...), want)

	e.must(200, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
	if l := leftovers(t, e, in); len(l) > 0 {
		t.Errorf("a sleeping sandbox keeps its network: %v", l)
	}
	expect(t, "woken", checks, probeIn(e, "acme", id, checks...), want)

	r := e.must(201, "POST", "/v1/sandbox/"+id+"/fork", "acme", nil)
	fork, _ := r.JSON(t)["id"].(string)
	if n, _ := r.JSON(t)["network"].(map[string]any); n == nil {
		t.Errorf("the fork's answer has no network: %s", r.Body)
	}
	expect(t, "the fork", checks, probeIn(e, "acme", fork, checks...), want)
	expect(t, "the original after the fork", checks, probeIn(e, "acme", id, checks...), want)
	a, b := probeIn(e, "acme", id, c("myip"))[0], probeIn(e, "acme", fork, c("myip"))[0]
	if a == b {
		t.Errorf("the fork shares its original's address %s", a)
	}
	for _, s := range []string{id, fork} {
		e.must(200, "DELETE", "/v1/sandbox/"+s, "acme", nil)
	}
	if l := leftovers(t, e, in); len(l) > 0 {
		t.Errorf("left after the ends: %v", l)
	}
}

// TestEgressConnectionBoundOnRunsc: --egress-max-conns bounds a sandbox's
// concurrent connections (a sandbox must not hold the host's conntrack
// table), and a closed one frees its place.
func TestEgressConnectionBoundOnRunsc(t *testing.T) {
	in := testenv.NewInternet(t)
	var cfg server.Config
	cfg.GVisor.Egress.Uplink, cfg.GVisor.Egress.DNS, cfg.GVisor.Egress.MaxConns = in.Uplink, in.DNS, 8
	cfg.Service.NetworkAllow = []string{"internet"}
	e := newEnvConfig(t, cfg)
	id := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"internet"}}})
	hold := `import socket
held, refused = [], 0
for i in range(20):
    try:
        held.append(socket.create_connection(("203.0.113.20", 80), timeout=3))
    except OSError:
        refused += 1
print(len(held), refused)
for s in held: s.close()
`
	out := e.sh("acme", id, "python3 -c '"+hold+"'")
	if strings.TrimSpace(out) != "8 12" {
		t.Errorf("20 connections under a bound of 8: held, refused = %q, want 8 12", out)
	}
	// The closed ones are gone from the count (conntrack keeps a closed
	// TCP connection a moment in TIME_WAIT: the count drops with it).
	var again string
	for range 30 {
		if again = strings.TrimSpace(e.sh("acme", id, "python3 -c '"+hold+"'")); again == "8 12" {
			break
		}
		time.Sleep(time.Second)
	}
	if again != "8 12" {
		t.Errorf("after closing them: %q, want 8 12 again", again)
	}
}

// TestEgressBandwidthBoundOnRunsc: --egress-rate-mbit bounds a sandbox's
// download. Asserted from below only, so a loaded machine, which only
// makes it slower, cannot fail it: at 40 Mbit/s (5 MB/s) 40 MB cannot
// arrive in under 6 s — the kernel's bucket holds a second's worth and
// the rule's burst a quarter more, 6.25 MB at once, then the rate. The
// unbounded path takes about 0.1 s; the rate itself is measured in
// BenchmarkEgress.
func TestEgressBandwidthBoundOnRunsc(t *testing.T) {
	e, _ := newEgressEnv(t, 40)
	id := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"internet"}}})
	out := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", download, "http://" + testenv.RawIP + "/bytes/40000000"}, "timeoutSec": 120})
	var n int
	var secs float64
	if _, err := fmt.Sscan(strings.TrimSpace(out.Stdout), &n, &secs); err != nil || n != 40000000 {
		t.Fatalf("download: %q %q", out.Stdout, out.Stderr)
	}
	if secs < 6 {
		t.Errorf("40 MB under a 40 Mbit/s bound took %.2f s: the bound does not hold (%.0f Mbit/s)", secs, float64(n)*8/secs/1e6)
	}
}
