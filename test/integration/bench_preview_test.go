package integration_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// insideLoop GETs /hello.txt from the server on the sandbox's own loopback
// N times, a new connection each (as a preview makes), and prints each
// request's microseconds, then the total's.
const insideLoop = `import http.client, sys, time
n = int(sys.argv[1]); out = []
t0 = time.perf_counter()
for _ in range(n):
    s = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", 8000)
    c.request("GET", "/hello.txt")
    r = c.getresponse(); r.read(); c.close()
    assert r.status == 200
    out.append(int((time.perf_counter() - s) * 1e6))
print(" ".join(map(str, out)), int((time.perf_counter() - t0) * 1e6))
`

// BenchmarkPreviewHTTP: one GET of a small file from Python's http.server
// inside a sandbox, through a preview (the host form, with a key: the
// server, the relay over the exec channel, the app) beside the same GET
// made from inside the sandbox on its own loopback, in one run. Read
// p50-ms and req/s (sequential requests) side by side.
func BenchmarkPreviewHTTP(b *testing.B) {
	e := newEnv(b)
	id := e.lease("acme", map[string]any{"ttlSec": 3600})
	e.sh("acme", id, "echo 'hello from inside' > hello.txt")
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
	e.waitListening("acme", id, 8000)
	host := "8000-" + id + ".localhost"

	b.Run("preview", func(b *testing.B) {
		var lat latencies
		start := time.Now()
		for range b.N {
			t0 := time.Now()
			req, _ := http.NewRequest("GET", e.http.URL+"/hello.txt", nil)
			req.Host = host
			req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(body) != "hello from inside\n" {
				b.Fatalf("through the preview: %d %q", res.StatusCode, body)
			}
			lat = append(lat, time.Since(t0))
		}
		lat.report(b)
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	})
	b.Run("inside", func(b *testing.B) {
		a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", insideLoop, strconv.Itoa(b.N)}, "timeoutSec": 600})
		f := strings.Fields(a.Stdout)
		if a.ExitCode != 0 || len(f) != b.N+1 {
			b.Fatalf("the loop inside: %d %q %q", a.ExitCode, a.Stdout, a.Stderr)
		}
		var lat latencies
		for _, us := range f[:b.N] {
			n, _ := strconv.Atoi(us)
			lat = append(lat, time.Duration(n)*time.Microsecond)
		}
		total, _ := strconv.Atoi(f[b.N])
		lat.report(b)
		b.ReportMetric(float64(b.N)/(time.Duration(total)*time.Microsecond).Seconds(), "req/s")
	})
}
