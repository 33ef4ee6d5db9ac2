package integration_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// download is a python loop inside a sandbox that fetches url and prints
// the bytes and seconds it took.
const download = `import sys, time, urllib.request
t = time.time(); n = 0
with urllib.request.urlopen(sys.argv[1], timeout=60) as r:
    while True:
        b = r.read(1 << 20)
        if not b: break
        n += len(b)
print(n, time.time() - t)`

// downloadsInside runs download in sandbox id of e, b.N times, and
// reports MB/s of the seconds it measured inside.
func downloadsInside(b *testing.B, e *env, id, url string, size int) {
	var secs float64
	for b.Loop() {
		out := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", download, url}, "timeoutSec": 300})
		secs += downloadSeconds(b, out.Stdout, out.Stderr, size)
	}
	b.ReportMetric(float64(size)*float64(b.N)/secs/1e6, "MB/s")
}

// downloadSeconds is the seconds download printed, once it printed size bytes.
func downloadSeconds(b *testing.B, stdout, stderr string, size int) float64 {
	b.Helper()
	var n int
	var s float64
	if _, err := fmt.Sscan(strings.TrimSpace(stdout), &n, &s); err != nil || n != size {
		b.Fatalf("download: %q %q", stdout, stderr)
	}
	return s
}

// zeroServer serves GET /N: N zero bytes, 1 MiB at a time, on 127.0.0.1:8099.
const zeroServer = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = int(self.path.strip("/"))
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = bytes(1 << 20)
        while n > 0:
            k = min(n, len(chunk))
            self.wfile.write(chunk[:k])
            n -= k
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8099), H).serve_forever()`

// BenchmarkEgress: a lease with a network policy beside one without (the
// target: ≤ 1.2×), and a 200 MB download from the test internet through
// egress — the rules alone ("internet") and through the name-checking
// proxy (a domain rule) — beside its floors in one run: the host's own
// download of the same file from the uplink namespace (Go's client, and the
// same Python client as inside) and the Python client inside a sandbox
// reading from its own loopback; then the same through a 100 Mbit/s bound,
// which the rules must hold.
func BenchmarkEgress(b *testing.B) {
	e, in := newEgressEnv(b, 0)
	b.Run("lease/none", func(b *testing.B) { measure(b, nil, func() func() { return e.leaseTimed(nil) }) })
	b.Run("lease/policy", func(b *testing.B) {
		measure(b, nil, func() func() {
			return e.leaseTimed(map[string]any{"network": map[string]any{"allow": []string{"allowed.example"}}})
		})
	})
	const size = 200 << 20
	b.Run("download/host", func(b *testing.B) {
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := egress.InNetNS(in.Uplink, func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
		var secs float64
		for b.Loop() {
			start := time.Now()
			res, err := client.Get("http://" + testenv.RawIP + "/bytes/" + strconv.Itoa(size))
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if n != size {
				b.Fatalf("got %d bytes", n)
			}
			secs += time.Since(start).Seconds()
		}
		b.ReportMetric(float64(size)*float64(b.N)/secs/1e6, "MB/s")
	})
	// The same Python client as inside, on the host in the uplink
	// namespace: what the client costs without gVisor and without rules.
	b.Run("download/host-python", func(b *testing.B) {
		var secs float64
		for b.Loop() {
			out, err := exec.Command("nsenter", "--net="+in.Uplink, "python3", "-c", download,
				"http://"+testenv.RawIP+"/bytes/"+strconv.Itoa(size)).CombinedOutput()
			if err != nil {
				b.Fatalf("download: %v %q", err, out)
			}
			secs += downloadSeconds(b, string(out), "", size)
		}
		b.ReportMetric(float64(size)*float64(b.N)/secs/1e6, "MB/s")
	})
	// The same client inside a sandbox with no network (no rules, no
	// veth, no proxy), reading from a server on its own loopback: what
	// gVisor's network stack and the one CPU of the class let through
	// before anything of egress is on the path (the server, Python too,
	// shares that CPU: a floor that is, if anything, low).
	b.Run("download/inside-loopback", func(b *testing.B) {
		id := e.lease("acme", nil)
		defer e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
		e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/processes", "acme", map[string]any{
			"argv": []string{"python3", "-c", zeroServer}})
		e.sh("acme", id, `for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8099), 1)' 2>/dev/null && exit 0; sleep 0.1; done; exit 1`)
		downloadsInside(b, e, id, "http://127.0.0.1:8099/"+strconv.Itoa(size), size)
	})
	inside := func(e *env, policy []string, url string) func(b *testing.B) {
		return func(b *testing.B) {
			id := e.lease("acme", map[string]any{"network": map[string]any{"allow": policy}})
			defer e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
			downloadsInside(b, e, id, url, size)
		}
	}
	b.Run("download/rules", inside(e, []string{"internet"}, "http://"+testenv.RawIP+"/bytes/"+strconv.Itoa(size)))
	b.Run("download/proxy", inside(e, []string{"raw.example"}, "http://raw.example/bytes/"+strconv.Itoa(size)))
	limited, _ := newEgressEnv(b, 100)
	b.Run("download/100Mbit", inside(limited, []string{"internet"}, "http://"+testenv.RawIP+"/bytes/"+strconv.Itoa(size)))
}

// BenchmarkResolverLookup: a lookup's p50 through a sandbox's resolver
// with its bounds (in-flight slots, the answer filter's cap, the bounded
// memory of answers) beside one without (Options.NoResolverBounds: the
// path before them), two servers up in one run, the rounds alternating (and
// which goes first) so the machine's load falls on both alike (the target: ≤ 1.05×).
func BenchmarkResolverLookup(b *testing.B) {
	bounded, _ := newEgressEnv(b, 0)
	in := testenv.NewInternet(b)
	var cfg server.Config
	cfg.GVisor.Egress.Uplink, cfg.GVisor.Egress.DNS, cfg.GVisor.Egress.NoResolverBounds = in.Uplink, in.DNS, true
	cfg.Service.NetworkAllow = []string{"*", "internet"}
	unbounded := newEnvConfig(b, cfg)
	policy := map[string]any{"network": map[string]any{"allow": []string{"allowed.example"}}}
	ids := []string{bounded.lease("acme", policy), unbounded.lease("acme", policy)}
	envs := []*env{bounded, unbounded}
	ms := [2][]float64{}
	for i, e := range envs {
		lookupTimes(e, ids[i], "allowed.example", 20) // warm
	}
	round := 0
	for b.Loop() {
		// Each round, the other one first: neither always runs right
		// after the other's exec.
		for k := range envs {
			i := (k + round) % 2
			ms[i] = append(ms[i], lookupTimes(envs[i], ids[i], "allowed.example", 100)...)
		}
		round++
	}
	p50 := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	with, without := p50(ms[0]), p50(ms[1])
	b.ReportMetric(with, "ms-p50-bounded")
	b.ReportMetric(without, "ms-p50-unbounded")
	b.ReportMetric(with/without, "ratio")
}
