package integration_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// The code contexts' benchmarks (issue 26):
//
//	go test -run '^$' -bench 'Context' -benchtime 40x ./test/integration/
//
// Warm: a run of 1+1 in a context that exists, through the API, against
// its floor, the kernel's own execute round trip inside the sandbox (a
// jupyter_client of the sandbox's own, warm, timing execute to idle), and
// beside /v1/exec's Python run (BenchmarkInterpWarm). New: a context opened
// and its first run. Plot: a matplotlib figure's PNG back through the API.

func (e *env) contextRun(b *testing.B, id, ctx, code string) wire.Execution {
	var ex wire.Execution
	json.Unmarshal(e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/contexts/"+ctx+"/run", "acme", map[string]any{"code": code}).Body, &ex)
	if ex.Error != nil {
		b.Fatalf("run %q: %+v", code, ex.Error)
	}
	return ex
}

func BenchmarkContextRun(b *testing.B) {
	e := benchEnv(b)
	id := e.lease("acme", nil)
	e.contextRun(b, id, "python", "1+1")
	measure(b, nil, func() func() {
		if ex := e.contextRun(b, id, "python", "1+1"); mainText(ex) != "2" {
			b.Fatalf("1+1: %+v", ex)
		}
		return nil
	})
}

// kernelFloor times, inside the sandbox, a warm jupyter_client's execute of
// 1+1 to the kernel's idle, n times, one line of milliseconds each.
const kernelFloor = `
import sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="python3"); km.start_kernel()
kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=120)
def run():
    mid = kc.execute("1+1")
    while True:
        m = kc.get_iopub_msg(timeout=30)
        if m["parent_header"].get("msg_id") == mid and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return
for _ in range(5): run()
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); run(); print((time.perf_counter() - t) * 1000)
km.shutdown_kernel(now=True)
`

func BenchmarkContextRunFloor(b *testing.B) {
	e := benchEnv(b)
	id := e.lease("acme", nil)
	x := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", kernelFloor, strconv.Itoa(b.N)}, "timeoutSec": 600})
	if x.ExitCode != 0 {
		b.Fatalf("the floor: %+v", x)
	}
	var lat latencies
	for _, l := range strings.Fields(x.Stdout) {
		ms, err := strconv.ParseFloat(l, 64)
		if err != nil {
			b.Fatalf("the floor said %q", x.Stdout)
		}
		lat = append(lat, time.Duration(ms*float64(time.Millisecond)))
	}
	for b.Loop() {
	}
	lat.report(b)
}

func BenchmarkContextNew(b *testing.B) {
	e := benchEnv(b)
	id := e.lease("acme", nil)
	measure(b, nil, func() func() {
		var c wire.CodeContext
		json.Unmarshal(e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/contexts", "acme", map[string]any{"language": "python"}).Body, &c)
		e.contextRun(b, id, c.ID, "1+1")
		return func() { e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"/contexts/"+c.ID, "acme", nil) }
	})
}

func BenchmarkContextPlot(b *testing.B) {
	e := benchEnv(b)
	id := e.lease("acme", nil)
	e.contextRun(b, id, "python", "import matplotlib.pyplot as plt")
	measure(b, nil, func() func() {
		ex := e.contextRun(b, id, "python", "plt.figure(); plt.plot([1, 3, 2]); plt.show()")
		if len(ex.Results) == 0 || ex.Results[0].Data["image/png"] == nil {
			b.Fatalf("no PNG: %+v", ex)
		}
		return nil
	})
}
