package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// rounds is how many lease + exec true + end round trips each client makes
// per benchmark iteration; the p50 of them is reported.
const rounds = 15

// gets is how many GETs of one sandbox measure a client's own cost per
// call (the round trip's ~150 ms lease varies by more than a client adds).
const gets = 200

func p50ms(ms []float64) float64 {
	slices.Sort(ms)
	return ms[len(ms)/2]
}

// BenchmarkRoundTrip: lease + `exec true` + end through each client against
// one server, p50 of 15 (p50-ms), and one GET of a sandbox, p50 of 200
// (get-p50-ms: the client's own cost per call, which the lease's variance
// hides). The floor is the same calls with net/http in Go; curl runs three
// processes a round (its start included; no get).
func BenchmarkRoundTrip(b *testing.B) {
	srv := testenv.Serve(b, gvisor.DefaultRunsc(), []string{"acme"})
	key := srv.Keys["acme"]
	env := append(os.Environ(), "SANDBOX_URL="+srv.URL, "SANDBOX_KEY="+key)

	b.Run("floor-net-http", func(b *testing.B) {
		call := func(method, path, body string) []byte {
			req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			defer res.Body.Close()
			out, _ := io.ReadAll(res.Body)
			if res.StatusCode >= 300 {
				b.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
			}
			return out
		}
		for b.Loop() {
			var ms []float64
			for range rounds {
				start := time.Now()
				var sb struct{ ID string }
				json.Unmarshal(call("POST", "/v1/sandbox", ""), &sb)
				call("POST", "/v1/sandbox/"+sb.ID+"/exec", `{"argv":["true"]}`)
				call("DELETE", "/v1/sandbox/"+sb.ID, "")
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			b.ReportMetric(p50ms(ms), "p50-ms")
			var sb struct{ ID string }
			json.Unmarshal(call("POST", "/v1/sandbox", ""), &sb)
			var get []float64
			for range gets {
				start := time.Now()
				call("GET", "/v1/sandbox/"+sb.ID, "")
				get = append(get, float64(time.Since(start).Microseconds())/1000)
			}
			call("DELETE", "/v1/sandbox/"+sb.ID, "")
			b.ReportMetric(p50ms(get), "get-p50-ms")
		}
	})
	b.Run("curl", func(b *testing.B) {
		curl := func(args ...string) []byte {
			out, err := exec.Command("curl", append([]string{"-sSf", "-H", "Authorization: Bearer " + key}, args...)...).Output()
			if err != nil {
				b.Fatalf("curl %v: %v", args, err)
			}
			return out
		}
		for b.Loop() {
			var ms []float64
			for range rounds {
				start := time.Now()
				var sb struct{ ID string }
				json.Unmarshal(curl("-X", "POST", srv.URL+"/v1/sandbox"), &sb)
				curl("-X", "POST", "-d", `{"argv":["true"]}`, srv.URL+"/v1/sandbox/"+sb.ID+"/exec")
				curl("-X", "DELETE", srv.URL+"/v1/sandbox/"+sb.ID)
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			b.ReportMetric(p50ms(ms), "p50-ms")
		}
	})
	b.Run("go-client", func(b *testing.B) {
		c := client.New(srv.URL, key)
		ctx := context.Background()
		for b.Loop() {
			var ms []float64
			for range rounds {
				start := time.Now()
				sb, err := c.Lease(ctx, client.LeaseRequest{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				if _, err := c.End(ctx, sb.ID, false); err != nil {
					b.Fatal(err)
				}
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			b.ReportMetric(p50ms(ms), "p50-ms")
			sb, _ := c.Lease(ctx, client.LeaseRequest{})
			var get []float64
			for range gets {
				start := time.Now()
				c.Get(ctx, sb.ID)
				get = append(get, float64(time.Since(start).Microseconds())/1000)
			}
			c.End(ctx, sb.ID, false)
			b.ReportMetric(p50ms(get), "get-p50-ms")
		}
	})
	// The interpreted SDKs loop in their own process and print the p50.
	script := func(b *testing.B, name string, argv ...string) {
		for b.Loop() {
			var out bytes.Buffer
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, os.Stderr
			if err := cmd.Run(); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			f := strings.Fields(out.String())
			if len(f) != 2 {
				b.Fatalf("%s printed %q", name, out.String())
			}
			p, err1 := strconv.ParseFloat(f[0], 64)
			g, err2 := strconv.ParseFloat(f[1], 64)
			if err1 != nil || err2 != nil {
				b.Fatalf("%s printed %q", name, out.String())
			}
			b.ReportMetric(p, "p50-ms")
			b.ReportMetric(g, "get-p50-ms")
		}
	}
	b.Run("python", func(b *testing.B) {
		script(b, "python", testenv.PythonSDK(b, "./python"), "-c", fmt.Sprintf(`
import time, statistics
from sandboxd import Sandbox
ms = []
for _ in range(%d):
    t = time.perf_counter()
    s = Sandbox.create()
    s.commands.run(["true"])
    s.kill()
    ms.append((time.perf_counter() - t) * 1000)
s = Sandbox.create()
get = []
for _ in range(%d):
    t = time.perf_counter()
    s.refresh()
    get.append((time.perf_counter() - t) * 1000)
s.kill()
print(sorted(ms)[len(ms)//2], sorted(get)[len(get)//2])
`, rounds, gets))
	})
	b.Run("typescript", func(b *testing.B) {
		node, err := exec.LookPath("node")
		if err != nil {
			b.Skip("no node")
		}
		idx, _ := filepath.Abs("js/index.mjs")
		script(b, "node", node, "--input-type=module", "-e", fmt.Sprintf(`
import { Sandbox } from %q;
const ms = [];
for (let i = 0; i < %d; i++) {
  const t = performance.now();
  const s = await Sandbox.create();
  await s.commands.run(["true"]);
  await s.kill();
  ms.push(performance.now() - t);
}
ms.sort((a, b) => a - b);
const s = await Sandbox.create();
const get = [];
for (let i = 0; i < %d; i++) {
  const t = performance.now();
  await s.refresh();
  get.push(performance.now() - t);
}
await s.kill();
get.sort((a, b) => a - b);
console.log(ms[Math.floor(ms.length / 2)], get[Math.floor(get.length / 2)]);
`, idx, rounds, gets))
	})
}
