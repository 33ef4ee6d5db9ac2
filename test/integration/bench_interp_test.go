package integration_test

import (
	"net/http"
	"testing"
)

// The interpreter's benchmarks:
//
//	go test -run '^$' -bench 'Interp' -benchtime 40x ./test/integration/
//
// Warm: POST /v1/exec python print(6*7) in a session that exists, against
// its floor, raw `runsc exec … python3 -c` in the same sandbox. Cold: the
// same run with no session (a sandbox is leased for it), against a lease
// followed by an exec of python3 -c through the API.

const sixTimesSeven = "print(6*7)"

// py runs sixTimesSeven in session ("" = a new one) and answers it.
func (e *env) py(b *testing.B, session string) codeAnswer {
	a := e.code("acme", map[string]any{"language": "py", "code": sixTimesSeven, "session_id": session})
	if a.Stdout != "42\n" {
		b.Fatalf("run: %+v", a)
	}
	return a
}

func BenchmarkInterpWarm(b *testing.B) {
	e := benchEnv(b)
	session := e.py(b, "").SandboxID
	measure(b, nil, func() func() { e.py(b, session); return nil })
}

func BenchmarkInterpWarmFloor(b *testing.B) {
	e := benchEnv(b)
	e.lease("acme", nil)
	_, flags, name := bundleOf(b, e)
	measure(b, nil, func() func() {
		runsc(b, flags, "exec", "--user", "1000:1000", "--cwd", "/mnt/data", name, "python3", "-c", sixTimesSeven)
		return nil
	})
}

func BenchmarkInterpCold(b *testing.B) {
	e := benchEnv(b)
	measure(b, nil, func() func() {
		id := e.py(b, "").SandboxID
		return func() { e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil) }
	})
}

func BenchmarkInterpColdFloor(b *testing.B) {
	e := benchEnv(b)
	measure(b, nil, func() func() {
		id := e.lease("acme", nil)
		if x := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", sixTimesSeven}}); x.Stdout != "42\n" {
			b.Fatalf("exec: %+v", x)
		}
		return func() { e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil) }
	})
}
