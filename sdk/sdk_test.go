package sdk

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// python is Debian's interpreter, which has the SDK's dependencies
// (python3-httpx, python3-websockets, python3-pytest); a python3 earlier
// on PATH (pyenv) may not.
const python = "/usr/bin/python3"

// installPython makes a venv with the system's site packages and installs
// sdk/python into it with the README's one pip command; its directory.
func installPython(t testing.TB) string {
	t.Helper()
	for _, mod := range []string{"httpx", "websockets", "pytest"} {
		if err := exec.Command(python, "-c", "import "+mod).Run(); err != nil {
			testenv.Missing(t, testenv.GVisor, "python3-"+mod+" (scripts/deps.sh installs it for the tests)")
		}
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(python, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v %s", err, out)
	}
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-build-isolation", "--no-index", "./python")
	pip.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v %s", err, out)
	}
	// pip builds in the source tree: leave it as it was.
	os.RemoveAll("python/build")
	os.RemoveAll("python/sandboxd.egg-info")
	return venv
}

// serve starts the server for an SDK suite, with an images directory of
// its own and, where the machine has a registry, a tiny image pushed to it
// that the server allows; the env the suite reads (SANDBOX_URL,
// SANDBOX_KEY, and SANDBOX_TEST_IMAGE_REF with the registry).
func serve(t *testing.T) []string {
	t.Helper()
	var o testenv.Options
	reg := testenv.MaybeRegistry(t, false)
	if reg != nil {
		o.ImageAllow = []string{reg.Host}
	}
	srv := testenv.ServeWith(t, gvisor.DefaultRunsc(), []string{"acme"}, o)
	env := append(os.Environ(), "SANDBOX_URL="+srv.URL, "SANDBOX_KEY="+srv.Keys["acme"])
	if reg != nil {
		env = append(env, "SANDBOX_TEST_IMAGE_REF="+reg.PushBusybox(t, "sdk/tool:1", map[string]string{"etc/greeting": "hi from the image\n"}))
	}
	return env
}

// TestPython installs sdk/python into a venv with one pip command that
// needs no package index, then runs its pytest suite on a real server.
func TestPython(t *testing.T) {
	env := serve(t)
	venv := installPython(t)
	// The tests import the installed package, not the source tree.
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "python/tests")
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
