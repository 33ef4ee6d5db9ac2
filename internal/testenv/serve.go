package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Server is a real `sandbox serve` process on loopback, for the suites of
// the clients (Go, CLI, SDKs): built from this checkout, on a data
// directory of its own, with a key per org.
type Server struct {
	URL  string            // http://127.0.0.1:PORT
	Data string            // its data directory
	Bin  string            // the sandbox binary
	Keys map[string]string // org → API key: OperatorOrg's admin, the others tenant
	// Images is its images directory: the shared test images (Images()),
	// or with ServeWith one of its own.
	Images string
	cmd    *exec.Cmd
	// runsc is the runsc binary (gvisor.DefaultRunsc, passed in: this
	// package imports no backend).
	runsc string

	waitOnce sync.Once
	waitErr  error
}

// Signal sends sig to the server process and waits for it to exit:
// its exit (nil for 0) and how long it took.
func (s *Server) Signal(sig os.Signal) (time.Duration, error) {
	start := time.Now()
	if err := s.cmd.Process.Signal(sig); err != nil {
		return 0, err
	}
	err := s.wait()
	return time.Since(start), err
}

// Runsc runs runsc on the server's state, for a test that looks past
// the server (`list -quiet`: a container's id per line).
func (s *Server) Runsc(args ...string) (string, error) {
	out, err := exec.Command(s.runsc, append([]string{"--root", filepath.Join(s.Data, "runtime", "runsc")}, args...)...).Output()
	return string(out), err
}

func (s *Server) wait() error {
	s.waitOnce.Do(func() { s.waitErr = s.cmd.Wait() })
	return s.waitErr
}

// OperatorOrg is the server's operator org (serve's default, which Serve
// keeps).
const OperatorOrg = "system"

// repoRoot is the checkout's root: the directory of the go.mod the tests
// build from.
func repoRoot() (string, error) {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(mod))), nil
}

// Binaries builds cmd/sandbox and cmd/sandbox-runner into one directory
// of the test's (the server finds its runner beside it; the directory goes
// with the test, so no binaries pile up in /tmp) and returns the sandbox
// binary. Go's build cache makes every build after the first a link, ~3 s.
func Binaries(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []string{"sandbox", "sandbox-runner"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, c), "./cmd/"+c)
		cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v: %s", c, err, out)
		}
	}
	return filepath.Join(dir, "sandbox")
}

// Serve starts the server on the exec image (and any other images named),
// with keys for orgs, and stops it at the test's end: every sandbox ended,
// the process interrupted, anything runsc still holds deleted, the data
// directory gone.
func Serve(t testing.TB, runsc string, orgs []string, images ...string) *Server {
	t.Helper()
	NeedGVisor(t, runsc, append([]string{"exec"}, images...)...)
	return ServeBin(t, runsc, Binaries(t), orgs)
}

// Options are what a test sets of the server ServeWith starts.
type Options struct {
	// Images are the class images it needs beyond exec.
	Images []string
	// ImageAllow are the registries (or repository prefixes) its tenants
	// may pull images from (serve --image-allow); none by default.
	ImageAllow []string
	// Internet, if set, is where its sandboxes' egress goes (NewInternet:
	// serve --egress-uplink and --egress-dns), every policy allowed
	// (--network-allow '*,internet'); nil: no network.
	Internet *Internet
}

// ServeWith is Serve with options, on an images directory of its own
// that holds the built class images by symlink: what its tenants pull or
// snapshot lands there (and goes with the test), never among the shared
// test images.
func ServeWith(t testing.TB, runsc string, orgs []string, o Options) *Server {
	t.Helper()
	NeedGVisor(t, runsc, append([]string{"exec"}, o.Images...)...)
	images := t.TempDir()
	classes, err := os.ReadDir(Images())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		if c.IsDir() && c.Name() != "oci" && !strings.HasPrefix(c.Name(), ".") {
			if err := os.Symlink(filepath.Join(Images(), c.Name()), filepath.Join(images, c.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	var args []string
	for _, a := range o.ImageAllow {
		args = append(args, "--image-allow", a)
	}
	if in := o.Internet; in != nil {
		args = append(args, "--egress-uplink", in.Uplink, "--egress-dns", in.DNS, "--network-allow", "*,internet")
	}
	return serve(t, runsc, Binaries(t), orgs, images, args)
}

// ServeBin is Serve with a given sandbox binary (an older build, for a
// before-and-after) and more flags for serve.
func ServeBin(t testing.TB, runsc, bin string, orgs []string, args ...string) *Server {
	t.Helper()
	return serve(t, runsc, bin, orgs, Images(), args)
}

func serve(t testing.TB, runsc, bin string, orgs []string, images string, args []string) *Server {
	t.Helper()
	data, err := os.MkdirTemp("", "sbs-") // short: runsc's socket paths have a limit
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Data: data, Bin: bin, Keys: map[string]string{}, Images: images, runsc: runsc}
	for _, org := range orgs {
		args := []string{"keys", "create", "--data", data, "--org", org}
		if org == OperatorOrg {
			// The operator's calls (quotas, keys, /metrics) need an admin
			// key; every other org's key is a tenant's, as a user's is.
			args = append(args, "--scope", "admin")
		}
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("keys create: %v", err)
		}
		s.Keys[org] = strings.TrimSpace(string(out))
	}
	base := []string{"serve", "--data", data, "--listen", "127.0.0.1:0", "--images", images, "--reap-every", "1h"}
	if runsc != "" { // "": the kube backend (ServeKube)
		base = append(base, "--runsc", runsc)
	}
	s.cmd = exec.Command(bin, append(base, args...)...)
	out, _ := s.cmd.StdoutPipe()
	s.cmd.Stderr = os.Stderr
	if !testing.Verbose() {
		s.cmd.Stderr = io.Discard
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		s.cmd.Process.Kill()
		t.Fatalf("serve printed nothing: %v", err)
	}
	go io.Copy(io.Discard, out)
	s.URL = strings.TrimSpace(strings.TrimPrefix(line, "sandbox: listening on "))
	t.Cleanup(s.stop)
	return s
}

// Pid is the server process's.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

func (s *Server) stop() {
	for _, key := range s.Keys {
		req, _ := http.NewRequest("GET", s.URL+"/v1/sandbox", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		var list struct{ Sandboxes []struct{ ID string } }
		if res, err := http.DefaultClient.Do(req); err == nil {
			json.NewDecoder(res.Body).Decode(&list)
			res.Body.Close()
		}
		for _, sb := range list.Sandboxes {
			req, _ := http.NewRequest("DELETE", s.URL+"/v1/sandbox/"+sb.ID+"?purge=1", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}
	}
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	if s.runsc == "" {
		os.RemoveAll(s.Data)
		return
	}
	root := filepath.Join(s.Data, "runtime", "runsc")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, s.runsc, "--root", root, "list", "-quiet").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			exec.CommandContext(ctx, s.runsc, "--root", root, "delete", "--force", id).Run()
		}
	}
	unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH)
	os.RemoveAll(s.Data)
}
