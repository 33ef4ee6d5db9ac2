package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// BenchmarkCLIExec: the wall time of `sandbox exec ID -- true` (the CLI's
// process start, its HTTP call, the server's runsc exec) beside the floor
// measured in the same run: `runsc exec` of the same container with the
// flags the server gave it (its process start included). p50 of 15.
func BenchmarkCLIExec(b *testing.B) {
	srv := testenv.Serve(b, gvisor.DefaultRunsc(), []string{"acme"})
	env := append(os.Environ(), "SANDBOX_URL="+srv.URL, "SANDBOX_KEY="+srv.Keys["acme"])
	out, err := exec.Command(srv.Bin, "lease", "-o", "json", "--server", srv.URL, "--key", srv.Keys["acme"]).Output()
	if err != nil {
		b.Fatal(err)
	}
	var sb struct{ ID string }
	json.Unmarshal(out, &sb)
	// The container and its runsc flags, from the bundle the server wrote
	// for the lease (the warm pool's are there too).
	metas, _ := filepath.Glob(filepath.Join(srv.Data, "runtime", "bundles", "*", "meta.json"))
	type bundleMeta struct {
		Name   string
		Flags  []string
		Labels map[string]string
	}
	var meta bundleMeta
	for _, m := range metas {
		var got bundleMeta
		raw, _ := os.ReadFile(m)
		if json.Unmarshal(raw, &got) == nil && got.Labels["sandbox.dev/id"] == sb.ID {
			meta = got
		}
	}
	if meta.Name == "" {
		b.Fatalf("no bundle of %s among %v", sb.ID, metas)
	}
	const rounds = 15
	timed := func(b *testing.B, name string, args []string) {
		for b.Loop() {
			var ms []float64
			for range rounds {
				cmd := exec.Command(name, args...)
				cmd.Env = env
				start := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%s %s: %v %s", name, strings.Join(args, " "), err, out)
				}
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			slices.Sort(ms)
			b.ReportMetric(ms[len(ms)/2], "p50-ms")
		}
	}
	b.Run("cli", func(b *testing.B) { timed(b, srv.Bin, []string{"exec", sb.ID, "--", "true"}) })
	b.Run("floor-runsc-exec", func(b *testing.B) {
		timed(b, gvisor.DefaultRunsc(), append(slices.Clone(meta.Flags), "exec", meta.Name, "true"))
	})
}
