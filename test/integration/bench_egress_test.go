package integration_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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

// BenchmarkEgress: a lease with a network policy beside one without (the
// target: ≤ 1.2×), and a 200 MB download from the test internet through
// egress — the rules alone ("internet") and through the name-checking
// proxy (a domain rule) — beside the host's own download of the same file
// from the uplink namespace, in one run; then the same through a 100
// Mbit/s bound, which the rules must hold.
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
	inside := func(e *env, policy []string, url string) func(b *testing.B) {
		return func(b *testing.B) {
			id := e.lease("acme", map[string]any{"network": map[string]any{"allow": policy}})
			defer e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
			var secs float64
			for b.Loop() {
				out := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", download, url}, "timeoutSec": 300})
				var n int
				var s float64
				if _, err := fmt.Sscan(strings.TrimSpace(out.Stdout), &n, &s); err != nil || n != size {
					b.Fatalf("download: %q %q", out.Stdout, out.Stderr)
				}
				secs += s
			}
			b.ReportMetric(float64(size)*float64(b.N)/secs/1e6, "MB/s")
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
