package server_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// The interpreter's benchmarks:
//
//	go test -run '^$' -bench 'Interp' -benchtime 40x ./internal/server/
//
// Warm: POST /v1/exec python print(6*7) in a session that exists, against
// its floor, raw `runsc exec … python3 -c` in the same sandbox. Cold: the
// same run with no session (a sandbox is leased for it), against a lease
// followed by an exec of python3 -c through the API.

const sixTimesSeven = "print(6*7)"

func BenchmarkInterpWarm(b *testing.B) {
	e := benchEnv(b)
	first := e.code("acme", map[string]any{"language": "py", "code": sixTimesSeven})
	var lat latencies
	for b.Loop() {
		start := time.Now()
		r := e.do("POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": sixTimesSeven, "session_id": first.SessionID})
		lat = append(lat, time.Since(start))
		if r.Status != http.StatusOK || r.JSON(b)["stdout"] != "42\n" {
			b.Fatalf("run: %d %s", r.Status, r.Body)
		}
	}
	lat.report(b)
}

func BenchmarkInterpWarmFloor(b *testing.B) {
	e := benchEnv(b)
	e.lease("acme", nil)
	_, flags, name := bundleOf(b, e)
	var lat latencies
	for b.Loop() {
		start := time.Now()
		runsc(b, flags, "exec", "--user", "1000:1000", "--cwd", "/mnt/data", name, "python3", "-c", sixTimesSeven)
		lat = append(lat, time.Since(start))
	}
	lat.report(b)
}

func BenchmarkInterpCold(b *testing.B) {
	e := benchEnv(b)
	var lat latencies
	for b.Loop() {
		start := time.Now()
		r := e.do("POST", "/v1/exec", "acme", map[string]any{"language": "py", "code": sixTimesSeven})
		lat = append(lat, time.Since(start))
		var a codeAnswer
		json.Unmarshal(r.Body, &a)
		if r.Status != http.StatusOK || a.Stdout != "42\n" {
			b.Fatalf("run: %d %s", r.Status, r.Body)
		}
		b.StopTimer()
		e.do("DELETE", "/v1/sandbox/"+a.SessionID, "acme", nil)
		b.StartTimer()
	}
	lat.report(b)
}

func BenchmarkInterpColdFloor(b *testing.B) {
	e := benchEnv(b)
	var lat latencies
	for b.Loop() {
		start := time.Now()
		r := e.do("POST", "/v1/sandbox", "acme", nil)
		if r.Status != http.StatusCreated {
			b.Fatalf("lease: %d %s", r.Status, r.Body)
		}
		id := r.JSON(b)["id"].(string)
		x := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", sixTimesSeven}})
		lat = append(lat, time.Since(start))
		if x.Stdout != "42\n" {
			b.Fatalf("exec: %+v", x)
		}
		b.StopTimer()
		e.do("DELETE", "/v1/sandbox/"+id, "acme", nil)
		b.StartTimer()
	}
	lat.report(b)
}
