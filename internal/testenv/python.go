package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Python is Debian's interpreter, which has the Python SDK's dependencies
// (python3-httpx, python3-websockets, python3-pytest); a python3 earlier on
// PATH (pyenv) may not.
const Python = "/usr/bin/python3"

// PythonSDK installs the Python SDK at dir (sdk/python) into a venv of its
// own with the system's site packages, with the SDK README's one pip
// command (no package index), and answers the venv's python. The suite
// then imports the installed package, not the source tree.
func PythonSDK(t testing.TB, dir string) string {
	t.Helper()
	for _, mod := range []string{"httpx", "websockets", "pytest"} {
		if err := exec.Command(Python, "-c", "import "+mod).Run(); err != nil {
			Missing(t, GVisor, "python3-"+mod+" (scripts/deps.sh installs it for the tests)")
		}
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(Python, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v %s", err, out)
	}
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-build-isolation", "--no-index", dir)
	pip.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	out, err := pip.CombinedOutput()
	// pip builds in the source tree: leave it as it was.
	os.RemoveAll(filepath.Join(dir, "build"))
	os.RemoveAll(filepath.Join(dir, "sandboxd.egg-info"))
	if err != nil {
		t.Fatalf("pip install: %v %s", err, out)
	}
	return filepath.Join(venv, "bin", "python")
}
