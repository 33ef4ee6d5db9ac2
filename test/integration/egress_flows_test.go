package integration_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// slowDownload fetches argv[1] inside a sandbox and keeps the count of
// bytes so far in argv[2] (or "err ..." when the connection fails).
const slowDownload = `import os, sys, urllib.request
n, out = 0, sys.argv[2]
def note(s):
    with open(out + ".tmp", "w") as f: f.write(s)
    os.replace(out + ".tmp", out)
try:
    with urllib.request.urlopen(sys.argv[1], timeout=30) as r:
        while True:
            b = r.read(65536)
            if not b: break
            n += len(b)
            note(str(n))
    note("done %d" % n)
except Exception as e:
    note("err %d %s" % (n, type(e).__name__))
`

// downloaded is how many bytes the download in id has so far.
func downloaded(t *testing.T, e *env, id string) (int, string) {
	t.Helper()
	s := strings.TrimSpace(e.sh("acme", id, "cat /tmp/n 2>/dev/null || echo 0"))
	f := strings.Fields(s)
	if len(f) > 1 {
		f = f[1:]
	}
	n, _ := strconv.Atoi(f[0])
	return n, s
}

// conntrackFrom counts the uplink's conntrack entries of flows ip opened.
func conntrackFrom(t *testing.T, in *testenv.Internet, ip netip.Addr) int {
	t.Helper()
	ns, err := netns.GetFromPath(in.Uplink)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && a.Unmap() == ip {
			n++
		}
	}
	return n
}

// TestEgressCutsOpenFlowsOnRunsc: a policy change reaches what is already
// open. A download from the test internet, at 1 MB/s (the bandwidth
// bound keeps it flowing and nothing piles up in buffers), stops within a
// second of PUT …/network {} — through the proxy (a domain rule) and
// forwarded by the rules (an address rule, its conntrack entry deleted) —
// while one the narrowed policy still allows keeps flowing; the end of a
// sandbox leaves no conntrack entry of its flows in the uplink.
func TestEgressCutsOpenFlowsOnRunsc(t *testing.T) {
	e, in := newEgressEnv(t, 8)
	const big = "/bytes/1073741824"
	for _, tc := range []struct {
		name   string
		allow  []string
		url    string
		after  []string // the policy it is changed to
		flows  bool     // the download goes on under it
		viaEnd bool     // ended instead (DELETE) with the download open
	}{
		{"proxied, closed", []string{"allowed.example"}, "http://allowed.example" + big, []string{}, false, false},
		{"forwarded, closed", []string{testenv.RawIP}, "http://" + testenv.RawIP + big, []string{}, false, false},
		{"proxied, narrowed to another name", []string{"allowed.example", "raw.example"}, "http://allowed.example" + big, []string{"raw.example"}, false, false},
		{"forwarded, narrowed to another address", []string{testenv.RawIP, testenv.WebIP}, "http://" + testenv.RawIP + big, []string{testenv.WebIP}, false, false},
		{"proxied, narrowed but still allowed", []string{"allowed.example", "raw.example"}, "http://allowed.example" + big, []string{"allowed.example"}, true, false},
		{"forwarded, narrowed but still allowed", []string{testenv.RawIP, testenv.WebIP}, "http://" + testenv.RawIP + big, []string{testenv.RawIP}, true, false},
		{"forwarded, ended", []string{testenv.RawIP}, "http://" + testenv.RawIP + big, nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := e.lease("acme", map[string]any{"network": map[string]any{"allow": tc.allow}})
			ip := netip.MustParseAddr(strings.TrimPrefix(probeIn(e, "acme", id, c("myip"))[0], "ok "))
			e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", slowDownload, tc.url, "/tmp/n"}})
			deadline := time.Now().Add(60 * time.Second)
			for n, s := downloaded(t, e, id); n < 300_000; n, s = downloaded(t, e, id) {
				if time.Now().After(deadline) || strings.HasPrefix(s, "err") || strings.HasPrefix(s, "done") {
					t.Fatalf("the download does not flow: %q", s)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if tc.viaEnd {
				if n := conntrackFrom(t, in, ip); n == 0 {
					t.Fatalf("no conntrack entry of the open download from %s", ip)
				}
				e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
				if n := conntrackFrom(t, in, ip); n != 0 {
					t.Errorf("%d conntrack entries of %s's flows outlive its end", n, ip)
				}
				return
			}
			defer e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
			e.must(http.StatusOK, "PUT", "/v1/sandbox/"+id+"/network", "acme", map[string]any{"allow": tc.after})
			// A second for what was in flight, then three measured.
			time.Sleep(time.Second)
			before, _ := downloaded(t, e, id)
			time.Sleep(3 * time.Second)
			after, s := downloaded(t, e, id)
			grew := after - before
			t.Logf("%d bytes in 3 s after the change (%s)", grew, s)
			if tc.flows && grew < 500_000 {
				t.Errorf("a download the new policy allows stopped: %d bytes in 3 s (%s)", grew, s)
			}
			if !tc.flows && grew > 64<<10 {
				t.Errorf("the download went on after the change: %d bytes in 3 s", grew)
			}
		})
	}
}

// nameProbe holds the checks of deny-by-name: TLS without SNI, and two
// requests on one kept-alive plain-HTTP connection.
const nameProbe = `
import json, socket, ssl, sys
def nosni(addr):
    ctx = ssl._create_unverified_context()
    with socket.create_connection((addr, 443), timeout=3) as s:
        with ctx.wrap_socket(s) as t:
            t.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % addr).encode())
            return t.recv(4096).decode().split("\r\n\r\n", 1)[-1].strip()
def keepalive(addr, *hosts):
    with socket.create_connection((addr, 80), timeout=3) as s:
        f = s.makefile("rb")
        out = []
        for h in hosts:
            s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % h).encode())
            status = f.readline().decode().strip()
            if not status:
                out.append("closed")
                return " | ".join(out)
            length = 0
            while True:
                line = f.readline().decode().strip()
                if not line: break
                if line.lower().startswith("content-length:"): length = int(line.split(":")[1])
            out.append(status.split(" ")[1] + " " + f.read(length).decode().strip())
        try:
            out.append("closed" if f.read(1) == b"" else "open")
        except socket.timeout:
            out.append("open")
        return " | ".join(out)
def udpecho(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"ping", (addr, 443))
    return s.recvfrom(64)[0].decode()
for check in json.loads(sys.argv[1]):
    try:
        print("ok", globals()[check[0]](*check[1:]))
    except Exception as e:
        print("fail", type(e).__name__, e)
`

func nameProbeIn(e *env, id string, checks ...[]any) []string {
	e.t.Helper()
	raw, _ := json.Marshal(checks)
	a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", nameProbe, string(raw)}, "timeoutSec": 120})
	lines := strings.Split(strings.TrimSpace(a.Stdout), "\n")
	if a.ExitCode != 0 || len(lines) != len(checks) {
		e.t.Fatalf("probe exited %d: %s%s", a.ExitCode, a.Stdout, a.Stderr)
	}
	return lines
}

// TestEgressDenyByNameOnRunsc: under {"allow":["internet"],"deny":
// ["x.example"]} x.example's address is refused to a connection that
// names nothing — TLS without SNI, plain TCP, HTTP to the bare address —
// though the sandbox never asked its resolver for the name (it learns the
// address elsewhere); a CNAME to x.example is x.example; other addresses
// stay open; UDP to it (QUIC), which no proxy sees, is refused by the rules.
// And every request on a kept-alive plain-HTTP connection is
// judged by its own Host: a second request for a refused name gets a 403
// and the connection's end.
func TestEgressDenyByNameOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e, _ := newEgressEnv(t, 0)
	id := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"internet"}, "deny": []string{"x.example"}}})
	checks := [][]any{
		c("http", "http://"+testenv.RawIP+"/"), // a control: an address of no denied name
		c("tcp", testenv.RawIP, 80),
		c("tcp", testenv.XIP, 80),                           // x.example's address, no name
		c("http", "http://"+testenv.XIP+"/"),                // the same, Host a bare address
		c("http", "http://"+testenv.XIP+"/", "raw.example"), // the same, under another name
		c("resolve", "x.example"),
		c("resolve", "alias.example"), // a CNAME to x.example
		c("resolve", "raw.example"),
	}
	want := []string{"ok hello " + testenv.RawIP, "ok", "fail", "fail", "fail", "fail", "fail", "ok " + testenv.RawIP}
	expect(t, "deny x.example", checks, probeIn(e, "acme", id, checks...), want)
	checks = [][]any{
		c("nosni", testenv.RawIP),
		c("nosni", testenv.XIP),
		c("udpecho", testenv.RawIP),
		c("udpecho", testenv.XIP), // QUIC's way past the proxy
		c("keepalive", testenv.RawIP, "raw.example", "raw.example"),
		c("keepalive", testenv.RawIP, "raw.example", "x.example", "raw.example"),
	}
	want = []string{
		"ok hello " + testenv.RawIP, "fail",
		"ok ping", "fail",
		"ok 200 hello raw.example | 200 hello raw.example | open",
		"ok 200 hello raw.example | 403 not allowed by this sandbox's network policy | closed",
	}
	expect(t, "deny x.example, TLS and kept-alive HTTP", checks, nameProbeIn(e, id, checks...), want)

	// Allowed by name: a second request for a name the policy does not
	// allow, on the allowed name's address, is refused as well.
	named := e.lease("acme", map[string]any{"network": map[string]any{"allow": []string{"allowed.example"}}})
	checks = [][]any{c("keepalive", testenv.WebIP, "allowed.example", "other.example")}
	probeIn(e, "acme", named, c("resolve", "allowed.example"))
	expect(t, "allow allowed.example, kept alive", checks, nameProbeIn(e, named, checks...),
		[]string{"ok 200 hello allowed.example | 403 not allowed by this sandbox's network policy | closed"})
}
