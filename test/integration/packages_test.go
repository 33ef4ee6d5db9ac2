package integration_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestPackageManagersOnRunsc: in the exec image, with a network that
// allows one name, an agent's usual installs work against that name: pip
// install --user, a venv's pip, npm install, git clone, curl; cargo builds
// a crate. Nothing else is reached (the policy holds: the real indexes are
// not asked).
func TestPackageManagersOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e, in := newEgressEnv(t, 0)
	packageManagers(t, e, in, "hello allowed.example", in.Queries)
}

// TestKubePackageManagers: the same on the kube backend, through its
// egress gateway, against the routed test internet.
func TestKubePackageManagers(t *testing.T) {
	cfg := server.Config{}
	cfg.Service.NetworkAllow = []string{"*", "internet"}
	cfg.Kube.RunnerImage = testenv.RunnerImage(t)
	cfg.Kube.GatewayDNS = testenv.RoutedDNS
	e, _, _ := newKubeEnvConfig(t, cfg)
	in := testenv.NewRoutedInternet(t)
	packageManagers(t, e, in, "allowed.example", in.Queries)
}

// packageManagers serves the package, the registry and the repository on
// web (allowed.example's hosts) and runs each install in a sandbox of e
// allowed that name; curl's answer has want in it. queries are the names
// the upstream resolver was asked.
func packageManagers(t *testing.T, e *env, web interface{ Handle(string, http.Handler) }, want string, queries func() []string) {
	steps := testenv.ServePackages(t, web, "allowed.example")
	id := e.lease("acme", map[string]any{"ttlSec": 600, "network": map[string]any{"allow": []string{"allowed.example"}}})
	steps = append([]testenv.PackageStep{{Name: "curl", Script: "curl -sS http://allowed.example/", Want: want}}, steps...)
	steps = append(steps, testenv.PackageStep{Name: "cargo build", Script: "export CARGO_HOME=/tmp/cargo && cargo new -q --vcs none hello && cd hello && cargo build -q --offline && ./target/debug/hello", Want: "Hello, world!"})
	for _, s := range steps {
		t.Run(s.Name, func(t *testing.T) {
			a := e.exec("acme", id, map[string]any{"argv": []string{"bash", "-c", s.Script + " 2>&1"}, "timeoutSec": 240})
			if a.ExitCode != 0 || !strings.Contains(a.Stdout, s.Want) {
				t.Errorf("%s: exit %d\n%s%s", s.Name, a.ExitCode, a.Stdout, a.Stderr)
			}
		})
	}
	// The real index is not reached: its name does not resolve.
	a := e.exec("acme", id, map[string]any{"argv": []string{"bash", "-c", "pip download -q --no-cache-dir --disable-pip-version-check -d /tmp/x --retries 0 --timeout 3 requests 2>&1"}, "timeoutSec": 60})
	if a.ExitCode == 0 {
		t.Errorf("pip reached the real index: %s", a.Stdout)
	}
	if q := queries(); strings.Contains(strings.Join(q, " "), "pypi.org") {
		t.Errorf("the sandbox's resolver asked for pypi.org upstream: %v", q)
	}
}
