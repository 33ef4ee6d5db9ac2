package testenv

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The test internet's package index (PyPI's simple API), npm registry and
// git server (git's dumb HTTP), each serving one package of the test's own:
// what an agent installs from, without the real ones.

// wheel is a pure-Python wheel of hello-sbx 1.0 whose module says greeting.
func wheel(t testing.TB, greeting string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	files := map[string]string{
		"hello_sbx/__init__.py":                 fmt.Sprintf("GREETING = %q\n", greeting),
		"hello_sbx-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: hello-sbx\nVersion: 1.0\n",
		"hello_sbx-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: sandbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"hello_sbx-1.0.dist-info/top_level.txt": "hello_sbx\n",
	}
	var record strings.Builder
	for name, body := range files {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
		sum := sha256.Sum256([]byte(body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(body))
	}
	record.WriteString("hello_sbx-1.0.dist-info/RECORD,,\n")
	w, _ := z.Create("hello_sbx-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// npmTarball is hello-sbx 1.0.0's package tarball, its index.js exporting
// greeting.
func npmTarball(t testing.TB, greeting string) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for name, body := range map[string]string{
		"package/package.json": `{"name":"hello-sbx","version":"1.0.0","main":"index.js"}`,
		"package/index.js":     fmt.Sprintf("module.exports = %q;\n", greeting),
	} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return b.Bytes()
}

// gitRepo is a bare repository with one commit (README saying greeting),
// ready for git's dumb HTTP (update-server-info): its directory.
func gitRepo(t testing.TB, greeting string) string {
	t.Helper()
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repo.git")
	run := func(d string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(work, 0o755)
	run(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte(greeting+"\n"), 0o644)
	run(work, "add", "README")
	run(work, "commit", "-q", "-m", "first")
	run(dir, "clone", "-q", "--bare", work, bare)
	run(bare, "update-server-info")
	return bare
}

// PackageStep is one install an agent makes, as a shell script whose
// output has Want in it: the suites of every client run the same ones
// (the SDKs' get them as JSON in SANDBOX_TEST_PACKAGES).
type PackageStep struct {
	Name   string `json:"name"`
	Script string `json:"script"`
	Want   string `json:"want"`
}

// ServePackages serves the package index, the npm registry and the git
// repository on web (host's paths in a test internet) and answers the
// installs that use them: pip install --user, a venv's pip, npm install and
// git clone, each against host.
func ServePackages(t testing.TB, web interface{ Handle(string, http.Handler) }, host string) []PackageStep {
	t.Helper()
	whl := wheel(t, "hi from the index")
	sum := sha256.Sum256(whl)
	const whlName = "hello_sbx-1.0-py3-none-any.whl"
	web.Handle("/simple/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/simple/hello-sbx/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, whlName, hex.EncodeToString(sum[:]), whlName)
	}))
	web.Handle("/files/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
	}))
	tgz := npmTarball(t, "hi from the registry")
	tsum := sha256.Sum256(tgz)
	web.Handle("/npm/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/npm/hello-sbx":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"name": "hello-sbx", "dist-tags": map[string]string{"latest": "1.0.0"},
				"versions": map[string]any{"1.0.0": map[string]any{
					"name": "hello-sbx", "version": "1.0.0", "main": "index.js",
					"dist": map[string]any{"tarball": "http://" + host + "/npm/hello-sbx/-/hello-sbx-1.0.0.tgz", "integrity": "sha256-" + base64.StdEncoding.EncodeToString(tsum[:])},
				}},
			})
		case "/npm/hello-sbx/-/hello-sbx-1.0.0.tgz":
			w.Write(tgz)
		default:
			http.NotFound(w, r)
		}
	}))
	repo := gitRepo(t, "hi from the git server")
	web.Handle("/git/repo.git/", http.StripPrefix("/git/repo.git/", http.FileServer(http.Dir(repo))))

	index := "--index-url http://" + host + "/simple/ --trusted-host " + host
	return []PackageStep{
		{"pip install --user", "pip install -q --user --disable-pip-version-check --no-cache-dir " + index + " hello-sbx && python3 -c 'import hello_sbx; print(hello_sbx.GREETING)'", "hi from the index"},
		{"venv", "python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --disable-pip-version-check --no-cache-dir " + index + " hello-sbx && /tmp/v/bin/python -c 'import hello_sbx; print(hello_sbx.GREETING)'", "hi from the index"},
		{"npm install", "mkdir -p app && cd app && npm install --silent --no-audit --no-fund --cache /tmp/npm-cache --registry http://" + host + "/npm/ hello-sbx && node -e 'console.log(require(\"hello-sbx\"))'", "hi from the registry"},
		{"git clone", "git clone -q http://" + host + "/git/repo.git r && cat r/README", "hi from the git server"},
	}
}

// PackagesJSON is steps as the SDK suites read them.
func PackagesJSON(steps []PackageStep) string {
	b, _ := json.Marshal(steps)
	return string(b)
}
