package integration_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sandboxd/sandbox/internal/testenv"
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

// previewEnv is the server the preview benchmarks run against: gVisor, or
// with SANDBOX_BENCH_BACKEND=kube a kube server on the test cluster whose
// pods carry the runner (the relay), as the chart's do.
func previewEnv(b *testing.B) *env {
	if os.Getenv("SANDBOX_BENCH_BACKEND") == "kube" {
		e, _, _ := newKubeRunnerEnv(b)
		return e
	}
	return newEnv(b)
}

// BenchmarkPreviewHTTP: one GET of a small file from Python's http.server
// inside a sandbox, through a preview (the host form, with a key: the
// server, runsc's port forward — or on a cluster the relay over exec —
// the app) beside the same GET made from inside the sandbox on its own
// loopback, in one run. Read p50-ms and req/s (sequential requests) side
// by side, and the sandbox's CPU a request through the preview costs. On
// the test cluster: SANDBOX_BENCH_BACKEND=kube.
func BenchmarkPreviewHTTP(b *testing.B) {
	e := previewEnv(b)
	id := e.lease("acme", map[string]any{"ttlSec": 3600})
	e.sh("acme", id, "echo 'hello from inside' > hello.txt")
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
	e.waitListening("acme", id, 8000)
	host := "8000-" + hostLabel(id) + ".localhost"

	// The sandbox's own CPU (its cgroup's, as stats report it) a request
	// through the preview costs: the app's and the path's inside — the
	// relay's loops under systrap, or none with runsc's port forward.
	cpu := func() float64 {
		v, _ := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/stats", "acme", nil).JSON(b)["cpuSeconds"].(float64)
		return v
	}
	b.Run("preview", func(b *testing.B) {
		var lat latencies
		cpu0 := cpu()
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
		if c := cpu(); c > 0 {
			b.ReportMetric((c-cpu0)*1e3/float64(b.N), "sandbox-cpu-ms/req")
		}
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

// modulePage writes a Vite-style page into the sandbox's workdir: an
// index.html whose module script imports n ES modules (m/0.js … m/n-1.js,
// each importing a shared one), and sets window.done to the page's time
// (performance.now(), from the navigation's start) once all ran.
const modulePage = `import os, sys
n = int(sys.argv[1])
os.makedirs("page/m", exist_ok=True)
open("page/m/shared.js", "w").write("export const base = 1;\n")
for i in range(n):
    open(f"page/m/{i}.js", "w").write(f"import {{ base }} from './shared.js';\nexport const v = base + {i};\n" + "// " + "x" * 2000 + "\n")
imports = "\n".join(f"import {{ v as v{i} }} from './m/{i}.js';" for i in range(n))
total = " + ".join(f"v{i}" for i in range(n))
open("page/index.html", "w").write(f"<!doctype html><title>modules</title><script type=module>\n{imports}\nwindow.sum = {total};\nwindow.done = performance.now();\n</script>")
`

// pageTimings is a JavaScript expression: the finished requests' times in
// the page's Resource Timing, p50/p90/p99 in ms — queued (the start to the
// request's sending: waiting for one of the six connections), ttfb (the
// request sent to its first byte: the server, the relay and the app) and
// body. A load that runs out of time says with it whether the answers were
// slow (under a host whose cores are oversubscribed, ttfb's tail goes to
// seconds: BENCHMARKS.md) or missing.
const pageTimings = `(() => { const r = performance.getEntriesByType("resource"); const q = (f) => { const a = r.map(f).sort((x, y) => x - y); return [0.5, 0.9, 0.99].map((p) => Math.round(a[Math.floor(a.length * p)])).join("/") }; return r.length + " finished; queued " + q((x) => x.requestStart - x.startTime) + " ms; ttfb " + q((x) => x.responseStart - x.requestStart) + " ms; body " + q((x) => x.responseEnd - x.responseStart) + " ms" })()`

// insidePage fetches the page and its modules on the sandbox's own
// loopback as a browser would (index.html, then the n+1 modules over 6
// keep-alive connections) N times, printing each load's microseconds.
const insidePage = `import http.client, sys, time, threading, queue
n, runs = int(sys.argv[1]), int(sys.argv[2])
def load():
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", 8000); c.request("GET", "/page/index.html"); r = c.getresponse(); r.read(); c.close()
    q = queue.Queue()
    for p in ["/page/m/%d.js" % i for i in range(n)] + ["/page/m/shared.js"]:
        q.put(p)
    def worker():
        c = http.client.HTTPConnection("127.0.0.1", 8000)
        while True:
            try: p = q.get_nowait()
            except queue.Empty: break
            c.request("GET", p); r = c.getresponse(); r.read(); assert r.status == 200
        c.close()
    ts = [threading.Thread(target=worker) for _ in range(6)]
    [t.start() for t in ts]; [t.join() for t in ts]
    return int((time.perf_counter() - t0) * 1e6)
print(" ".join(str(load()) for _ in range(runs)))
`

// BenchmarkPreviewModulePage: a page of 300 ES modules (a Vite dev
// server's shape) from Python's http.server inside a sandbox, loaded by a
// real Chromium through a preview link (host form, the browser's cache off)
// until the modules ran, beside the same 302 requests made inside the
// sandbox with a browser's six keep-alive connections (issue 28's target:
// ≤ 2×). Read page-p50-ms and inside-p50-ms.
//
// Opt-in (SANDBOX_BENCH_PAGE=1): in CI's once-over pass of every benchmark
// the page once never finished (a module's load failed, so the page's
// script never ran), which is open; a load is bounded at 2 minutes and a
// failed one says what the page got.
func BenchmarkPreviewModulePage(b *testing.B) {
	const modules = 300
	if os.Getenv("SANDBOX_BENCH_PAGE") != "1" {
		b.Skip("opt-in: SANDBOX_BENCH_PAGE=1 (a real Chromium, ~1 min)")
	}
	e := previewEnv(b)
	id := e.lease("acme", map[string]any{"ttlSec": 3600})
	if a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", modulePage, strconv.Itoa(modules)}}); a.ExitCode != 0 {
		b.Fatalf("the page: %+v", a)
	}
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
	e.waitListening("acme", id, 8000)
	ctx, cancel := browser(b)
	defer cancel()
	cacheOff := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true})
		return err
	})
	if err := chromedp.Do(ctx, cacheOff); err != nil {
		b.Fatal(err)
	}
	link := e.previewLink("acme", id, 8000, 3600)["url"].(string)
	page := link[:strings.Index(link, "?")] + "page/index.html"
	// The link sets the preview's cookie; every load after is the page's own.
	if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
		b.Fatal(err)
	}
	load := func() time.Duration {
		b.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		ms, err := chromedp.Run(wctx, chromedp.Evaluate[float64](`new Promise((ok) => { const t = setInterval(() => { if (window.done) { clearInterval(t); ok(window.done) } }, 2) })`, chromedp.EvalAwaitPromise))
		cancel()
		if err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.title + " | " + performance.getEntriesByType("resource").length + " resources, failed: " + performance.getEntriesByType("resource").filter((r) => r.responseStatus >= 400 || r.transferSize === 0).map((r) => r.name + " " + r.responseStatus).slice(0, 5).join(", ") + " | " + `+pageTimings))
			b.Fatalf("the page did not finish: %v (%s)", err, got)
		}
		if sum, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.sum`)); sum != modules+modules*(modules-1)/2 {
			b.Fatalf("the page's sum: %d", sum)
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	load() // warm: the relay and the server's own caches
	var through []time.Duration
	for b.Loop() {
		through = append(through, load())
	}
	b.StopTimer()
	a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", insidePage, strconv.Itoa(modules), strconv.Itoa(len(through))}, "timeoutSec": 600})
	var inside []time.Duration
	for _, us := range strings.Fields(a.Stdout) {
		n, _ := strconv.Atoi(us)
		inside = append(inside, time.Duration(n)*time.Microsecond)
	}
	if a.ExitCode != 0 || len(inside) != len(through) {
		b.Fatalf("the loads inside: %d %q %q", a.ExitCode, a.Stdout, a.Stderr)
	}
	b.ReportMetric(float64(testenv.P50(through).Microseconds())/1000, "page-p50-ms")
	b.ReportMetric(float64(testenv.P50(inside).Microseconds())/1000, "inside-p50-ms")
	b.ReportMetric(float64(testenv.P50(through))/float64(max(1, testenv.P50(inside))), "x-inside")
	b.ReportMetric(0, "ns/op") // each op holds untimed checks; the p50s are the result
}
