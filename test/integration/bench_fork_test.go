package integration_test

import (
	"net/http"
	"testing"
	"time"
)

// BenchmarkFork: POST /fork of an idle exec sandbox until the fork runs,
// beside a fresh lease in the same run (the target: fork ≤ 1.5× lease),
// and a fork of one whose process holds 500 MB (the checkpoint writes, and
// the restore reads, every page).
func BenchmarkFork(b *testing.B) {
	e := benchEnv(b)
	forkOf := func(id string) func() func() {
		return func() func() {
			r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/fork", "acme", nil)
			fork, _ := r.JSON(b)["id"].(string)
			return func() { e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+fork, "acme", nil) }
		}
	}
	idle := e.lease("acme", nil)
	b.Run("idle", func(b *testing.B) { measure(b, nil, forkOf(idle)) })
	b.Run("lease", func(b *testing.B) { measure(b, nil, func() func() { return e.leaseTimed(nil) }) })
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+idle, "acme", nil)

	big := e.lease("acme", nil)
	p := e.startProcess("acme", big, map[string]any{"argv": []string{"python3", "-u", "-c",
		"import time\nb = bytearray(500 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ntime.sleep(3600)"}})
	for {
		st := e.process("acme", big, p.Pid)
		if st.OutputBytes > 0 {
			break
		}
		if st.Status != "running" {
			b.Fatalf("the 500 MB process: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Run("500MB", func(b *testing.B) { measure(b, nil, forkOf(big)) })
}
