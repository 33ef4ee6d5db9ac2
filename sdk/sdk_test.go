package sdk

import (
	"os"
	"os/exec"
	"testing"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// serve starts the server for an SDK suite, with an images directory of
// its own and, where the machine has a registry, a tiny image pushed to it
// that the server allows; the env the suite reads (SANDBOX_URL,
// SANDBOX_KEY, SANDBOX_TEST_NETWORK and SANDBOX_TEST_PACKAGES: the name its
// sandboxes may reach and the installs to try there, and
// SANDBOX_TEST_IMAGE_REF with the registry).
func serve(t *testing.T) []string {
	t.Helper()
	var o testenv.Options
	reg := testenv.MaybeRegistry(t, false)
	if reg != nil {
		o.ImageAllow = []string{reg.Host}
	}
	testenv.NeedGVisor(t, gvisor.DefaultRunsc(), "exec")
	o.Internet = testenv.NewInternet(t) // the network cases' (allowed.example)
	packages := testenv.ServePackages(t, o.Internet, "allowed.example")
	srv := testenv.ServeWith(t, gvisor.DefaultRunsc(), []string{"acme"}, o)
	env := append(os.Environ(), "SANDBOX_URL="+srv.URL, "SANDBOX_KEY="+srv.Keys["acme"], "SANDBOX_TEST_NETWORK=allowed.example",
		"SANDBOX_TEST_PACKAGES="+testenv.PackagesJSON(packages))
	if reg != nil {
		env = append(env, "SANDBOX_TEST_IMAGE_REF="+reg.PushBusybox(t, "sdk/tool:1", map[string]string{"etc/greeting": "hi from the image\n"}))
	}
	return env
}

// TestPython installs sdk/python into a venv with one pip command that
// needs no package index, then runs its pytest suite on a real server.
func TestPython(t *testing.T) {
	env := serve(t)
	py := testenv.PythonSDK(t, "./python")
	cmd := exec.Command(py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "python/tests")
	cmd.Env = append(env, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}

// TestTypeScript runs the TypeScript SDK's node:test suite on a real server
// (Node >= 20; its WebSocket is Node's own, behind a flag on 20).
func TestTypeScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, testenv.GVisor, "node (scripts/deps.sh installs nodejs for the tests)")
	}
	env := serve(t)
	args := []string{"--test", "js/test/"}
	if exec.Command(node, "-e", "process.exit(typeof WebSocket === 'undefined' ? 1 : 0)").Run() != nil {
		args = append([]string{"--experimental-websocket"}, args...)
	}
	cmd := exec.Command(node, args...)
	cmd.Env = append(env, "NODE_NO_WARNINGS=1")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}

// TestTypeScriptTypes checks the TypeScript SDK's declarations with the
// real compiler: tsc (the package's pinned dev dependency, from npm) over
// index.d.ts and test/types.ts, which calls every method as a user would.
func TestTypeScriptTypes(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, testenv.GVisor, "npm (scripts/deps.sh installs it for the tests)")
	}
	install := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	install.Dir = "js"
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	tsc := exec.Command("node", "node_modules/typescript/bin/tsc", "-p", ".")
	tsc.Dir = "js"
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
}
