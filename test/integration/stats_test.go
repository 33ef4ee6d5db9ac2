package integration_test

import (
	"net/http"
	"testing"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
)

// TestStats: a running sandbox's use, by the backend's own count — CPU
// that grows with work done, memory, the processes inside (init and a
// background sleeper at least) — and its disks as df inside sees them; a
// sleeping one is not woken to be read (409); another org's is a 404.
func TestStats(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		e.need(t, runtime.CapStats, "CPU, memory and processes are the backend's count")
		id := e.lease("acme", nil)
		e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "600"}})
		before := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/stats", "acme", nil).JSON(t)
		e.sh("acme", id, "python3 -c 'sum(range(30000000))'")
		after := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/stats", "acme", nil).JSON(t)
		cpu0, _ := before["cpuSeconds"].(float64)
		cpu1, _ := after["cpuSeconds"].(float64)
		mem, _ := after["memoryBytes"].(float64)
		procs, _ := after["processes"].(float64)
		disk, _ := after["disk"].([]any)
		if cpu1 <= cpu0 || cpu1-cpu0 < 0.2 || mem < 1<<20 || procs < 2 || len(disk) == 0 || after["unavailable"] != nil {
			t.Errorf("stats before %v\nafter a second of work %v", before, after)
		}
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/stats", "globex", nil)
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/sleep", "acme", nil)
		e.must(http.StatusConflict, "GET", "/v1/sandbox/"+id+"/stats", "acme", nil)
		if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "sleeping" {
			t.Errorf("reading stats woke the sandbox: %v", sb)
		}
	})
}
