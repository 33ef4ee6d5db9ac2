package integration_test

import (
	"fmt"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/image"
)

func killContainer(t *testing.T, e *env, name string) {
	t.Helper()
	out, err := exec.Command(gvisor.DefaultRunsc(), "--root", filepath.Join(e.data, "runtime", "runsc"), "delete", "--force", name).CombinedOutput()
	if err != nil {
		t.Fatalf("runsc delete: %v: %s", err, out)
	}
}

// hostAddrs lists every address of this host, loopback included.
func hostAddrs(t *testing.T) []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"127.0.0.1", "localhost"}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

func TestSandboxCannotReachHost(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(e.http.URL, "http://"))

	// A second listener on every host address, to be sure "unreachable" is
	// the sandbox's doing and not a server bound to loopback only.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	_, wide, _ := net.SplitHostPort(ln.Addr().String())

	// Sanity: from the host, the wide listener answers on every address.
	for _, addr := range hostAddrs(t) {
		c, err := net.Dial("tcp", net.JoinHostPort(addr, wide))
		if err != nil {
			t.Fatalf("host cannot reach its own %s:%s: %v", addr, wide, err)
		}
		c.Close()
	}

	var targets []string
	for _, addr := range hostAddrs(t) {
		targets = append(targets, fmt.Sprintf("(%q, %s)", addr, port), fmt.Sprintf("(%q, %s)", addr, wide))
	}
	script := `
import socket, sys
ok = True
for host, port in [` + strings.Join(targets, ", ") + `]:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("REACHED", host, port)
        ok = False
    except Exception as e:
        print("refused", host, port, type(e).__name__)
    finally:
        s.close()
sys.exit(0 if ok else 1)
`
	out := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", script}})
	if out.ExitCode != 0 {
		t.Errorf("the sandbox reached the host:\n%s%s", out.Stdout, out.Stderr)
	}

	// Host files: the data directory, a marker file, the host's own
	// identity, the runsc binary.
	marker := filepath.Join(os.TempDir(), "sandbox-host-marker")
	os.WriteFile(marker, []byte("host only"), 0o644)
	defer os.Remove(marker)
	hostname, _ := os.Hostname()
	wd, _ := os.Getwd()
	for _, p := range []string{e.data, filepath.Join(e.data, "control.db"), marker, gvisor.DefaultRunsc(), wd, "/proc/1/root" + e.data} {
		if out := e.exec("acme", id, map[string]any{"argv": []string{"test", "-e", p}}); out.ExitCode == 0 {
			t.Errorf("host path %s is visible inside", p)
		}
	}
	if h := strings.TrimSpace(e.sh("acme", id, "hostname")); h == hostname {
		t.Errorf("sandbox has the host's hostname %q", h)
	}
	// The server's environment never reaches a program inside.
	t.Setenv("SANDBOX_SECRET_PROBE", "leak")
	if env := e.sh("acme", id, "env"); strings.Contains(env, "SANDBOX_SECRET_PROBE") || strings.Contains(env, "sbk_") {
		t.Errorf("host environment leaked:\n%s", env)
	}
	// Writes to the image land in the sandbox's own overlay, never in the
	// shared image on the host.
	e.sh("acme", id, "echo probe > /home/user/overlay-probe")
	rootfs, err := image.Rootfs(imagesDir(), "exec")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "home/user/overlay-probe")); err == nil {
		t.Errorf("a write inside reached the shared image")
	}
	if out := e.exec("acme", id, map[string]any{"command": "echo hacked > /etc/motd"}); out.ExitCode == 0 {
		t.Errorf("uid 1000 wrote to /etc")
	}
}
