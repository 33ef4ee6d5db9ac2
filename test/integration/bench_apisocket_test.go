package integration_test

import (
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// apiLoop GETs a sandbox's own lease N times with its credential, a new
// connection each: over the API socket inside the sandbox (argv: N id
// unix), or over TCP to host:port (argv: N id tcp host port, the floor,
// run on the host). It prints each call's microseconds, then the total's.
const apiLoop = `import http.client, socket, sys, time
n, sid, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tok = open("/run/sandbox/token").read().strip() if mode == "unix" else sys.argv[6]
class UnixConn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect("/run/sandbox/api.sock")
out = []
t0 = time.perf_counter()
for _ in range(n):
    s = time.perf_counter()
    c = UnixConn("sandbox.internal") if mode == "unix" else http.client.HTTPConnection(sys.argv[4], int(sys.argv[5]))
    c.request("GET", "/v1/sandbox/" + sid, headers={"Authorization": "Bearer " + tok})
    r = c.getresponse(); r.read(); c.close()
    assert r.status == 200, r.status
    out.append(int((time.perf_counter() - s) * 1e6))
print(" ".join(map(str, out)), int((time.perf_counter() - t0) * 1e6))
`

// BenchmarkAPISocket: a sandbox reading its own lease with its credential
// over its API socket (the runner's relay, the exec channel, the server's
// API), beside the floor: the same Python client making the same call on
// the host over loopback TCP straight to the server, in one run. Read
// p50-ms side by side.
func BenchmarkAPISocket(b *testing.B) {
	e := newEnv(b)
	id := e.lease("acme", map[string]any{"ttlSec": 3600})
	tok := e.credentialIn("acme", id)
	report := func(b *testing.B, out string) {
		f := strings.Fields(out)
		if len(f) != b.N+1 {
			b.Fatalf("the loop: %q", out)
		}
		var lat latencies
		for _, us := range f[:b.N] {
			n, _ := strconv.Atoi(us)
			lat = append(lat, time.Duration(n)*time.Microsecond)
		}
		lat.report(b)
	}
	b.Run("socket", func(b *testing.B) {
		a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", apiLoop, strconv.Itoa(b.N), id, "unix"}, "timeoutSec": 600})
		if a.ExitCode != 0 {
			b.Fatalf("inside: %d %q %q", a.ExitCode, a.Stdout, a.Stderr)
		}
		report(b, a.Stdout)
	})
	b.Run("floor-host-tcp", func(b *testing.B) {
		u, _ := url.Parse(e.http.URL)
		out, err := exec.Command("python3", "-c", apiLoop, strconv.Itoa(b.N), id, "tcp", u.Hostname(), u.Port(), tok).CombinedOutput()
		if err != nil {
			b.Fatalf("on the host: %v %s", err, out)
		}
		report(b, string(out))
	})
}
