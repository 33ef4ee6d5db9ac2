package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// cli runs the built binary as a user would, against srv.
type cli struct {
	t    *testing.T
	bin  string
	env  []string
	home string
}

func (c cli) run(stdin string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("%v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func (c cli) must(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("sandbox %s: exit %d: %s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// backends runs f against a real server of each backend with keys for
// orgs: gVisor on this machine, and pods on the test cluster (skipped, or
// failed in CI, without one).
func backends(t *testing.T, orgs []string, f func(t *testing.T, srv *testenv.Server, backend string)) {
	for _, b := range []string{"gvisor", "kube"} {
		t.Run(b, func(t *testing.T) {
			var srv *testenv.Server
			if b == "kube" {
				srv = testenv.ServeKube(t, orgs)
			} else {
				srv = testenv.Serve(t, gvisor.DefaultRunsc(), orgs)
			}
			f(t, srv, b)
		})
	}
}

// TestCLI: the client verbs of the binary on a real server and runtime —
// login, lease, ls, get, exec (exit code, stdin), cp of a tree both ways,
// logs, run-code, renew, sleep/wake (and pause/resume), stop, end — each output format once.
func TestCLI(t *testing.T) {
	backends(t, []string{"acme"}, func(t *testing.T, srv *testenv.Server, backend string) {
		home := t.TempDir()
		c := cli{t: t, bin: srv.Bin, home: home, env: []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}}

		// No server known yet: a clear refusal.
		if _, errs, code := c.run("", "ls"); code != 2 || !strings.Contains(errs, "sandbox login") {
			t.Errorf("ls with no server: %d %q", code, errs)
		}
		c.must("login", "--server", srv.URL, "--key", srv.Keys["acme"])
		if st, err := os.Stat(filepath.Join(home, ".config", "sandbox", "config.json")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("the login file: %v %v", st, err)
		}

		var sb struct{ ID, Kind, Status string }
		json.Unmarshal([]byte(c.must("lease", "--ttl", "10m", "-o", "json")), &sb)
		if sb.Kind != "sandbox" || sb.Status != "running" {
			t.Fatalf("lease: %+v", sb)
		}
		if out := c.must("ls"); !strings.Contains(out, sb.ID) || !strings.HasPrefix(out, "ID ") {
			t.Errorf("ls: %s", out)
		}
		if out := c.must("get", sb.ID, "-o", "yaml"); !strings.Contains(out, "id: "+sb.ID) {
			t.Errorf("get -o yaml: %s", out)
		}

		// exec: the program's exit code is the CLI's; stdin goes through.
		if out, _, code := c.run("piped\n", "exec", sb.ID, "--", "sh", "-c", "cat; exit 7"); code != 7 || out != "piped\n" {
			t.Errorf("exec: %q exit %d", out, code)
		}
		// Its output is whole, past the 1 MiB the buffered answer keeps,
		// binary bytes and stderr included.
		if out, errs, code := c.run("", "exec", sb.ID, "--", "sh", "-c", "head -c 3000000 /dev/zero; printf '\\377' >&2; exit 3"); code != 3 || len(out) != 3000000 || strings.Trim(out, "\x00") != "" || errs != "\xff" {
			t.Errorf("exec of 3 MB: %d bytes, stderr %q, exit %d", len(out), errs, code)
		}
		// Stdin that JSON text would mangle is refused, with the way that works.
		if _, errs, code := c.run("\xff\x00", "exec", sb.ID, "--", "cat"); code == 0 || !strings.Contains(errs, "sandbox cp") {
			t.Errorf("exec with binary stdin: %d %q", code, errs)
		}
		if _, errs, code := c.run("", "exec", "sb_"+strings.Repeat("z", 26), "--", "true"); code != 2 || !strings.Contains(errs, "404") {
			t.Errorf("exec on an unknown id: %d %q", code, errs)
		}

		// cp: a tree with a binary file and an empty directory, up and back.
		src := t.TempDir()
		os.MkdirAll(filepath.Join(src, "tree", "sub", "empty"), 0o755)
		bin := []byte{0, 255, 1, '\n', 0xc3}
		os.WriteFile(filepath.Join(src, "tree", "sub", "b.dat"), bin, 0o644)
		os.WriteFile(filepath.Join(src, "tree", "top.txt"), []byte("top"), 0o644)
		os.WriteFile(filepath.Join(src, "tree", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
		os.Symlink("run.sh", filepath.Join(src, "tree", "link"))
		os.Symlink("/etc/passwd", filepath.Join(src, "tree", "out")) // left out: it points off the tree
		c.must("cp", filepath.Join(src, "tree"), sb.ID+":up")
		d := "755"
		if out := c.must("exec", sb.ID, "--", "sh", "-c", "cd up && find . -printf '%p %m %y\\n' | sort && ./link"); out != ". "+d+" d\n./link 777 l\n./run.sh 755 f\n./sub "+d+" d\n./sub/b.dat 644 f\n./sub/empty "+d+" d\n./top.txt 644 f\nran\n" {
			t.Errorf("the tree in the sandbox:\n%s", out)
		}
		back := t.TempDir()
		c.must("cp", sb.ID+":up", back)
		if got, _ := os.ReadFile(filepath.Join(back, "up", "sub", "b.dat")); !bytes.Equal(got, bin) {
			t.Errorf("the binary file came back as %q", got)
		}
		if st, err := os.Stat(filepath.Join(back, "up", "sub", "empty")); err != nil || !st.IsDir() {
			t.Errorf("the empty directory: %v", err)
		}
		if l, err := os.Readlink(filepath.Join(back, "up", "link")); err != nil || l != "run.sh" {
			t.Errorf("the link came back as %q %v", l, err)
		}
		if st, err := os.Stat(filepath.Join(back, "up", "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("the script's mode came back as %v %v", st.Mode(), err)
		}

		// logs, run-code.
		c.must("exec", "--session", "build", sb.ID, "--", "echo", "narrated")
		if out := c.must("logs", "build"); out != "narrated\n" {
			t.Errorf("logs: %q", out)
		}
		prog := filepath.Join(src, "p.py")
		os.WriteFile(prog, []byte("import sys\nprint(sys.argv[1:])\nsys.exit(4)"), 0o644)
		if out, _, code := c.run("", "run-code", prog, "--", "a", "b"); code != 4 || out != "['a', 'b']\n" {
			t.Errorf("run-code: %q exit %d", out, code)
		}

		// Completion: bash loads the script and completes a verb and an id.
		script := c.must("completion", "bash")
		cmd := exec.Command("bash", "-c", script+`
	COMP_WORDS=(sandbox ren); COMP_CWORD=1; _sandbox; echo "${COMPREPLY[@]}"
	COMP_WORDS=(sandbox get sb_); COMP_CWORD=2; _sandbox; echo "${COMPREPLY[@]}"`)
		cmd.Env = append(c.env, "PATH="+filepath.Dir(c.bin)+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "renew\n") || !strings.Contains(string(out), sb.ID) {
			t.Errorf("bash completion: %v %q", err, out)
		}

		// bench: the TTI definition (a lease, then node -v), in a row and at
		// once; every sample's sandbox ended after.
		live := strings.Count(c.must("ls", "-o", "json"), `"id"`)
		var bench []struct {
			Mode            string
			Samples, Failed int
			P50Ms, WallMs   float64
		}
		if err := json.Unmarshal([]byte(c.must("bench", "--sequential", "3", "--burst", "3", "-o", "json")), &bench); err != nil ||
			len(bench) != 2 || bench[0].Mode != "sequential" || bench[1].Mode != "burst" || bench[0].Samples != 3 || bench[1].Failed != 0 ||
			bench[0].P50Ms <= 0 || bench[1].WallMs <= 0 {
			t.Errorf("bench: %+v %v", bench, err)
		}
		if out := c.must("ls", "-o", "json"); strings.Count(out, `"id"`) != live {
			t.Errorf("bench left sandboxes behind:\n%s", out)
		}
		if _, errs, code := c.run("", "bench", "--sequential", "0"); code != 2 || !strings.Contains(errs, "one must be above 0") {
			t.Errorf("bench with no samples: %d %q", code, errs)
		}
		// A failed sample is counted, the run goes on, its reason comes after.
		out, errs, code := c.run("", "bench", "--sequential", "2", "--command", "exit 3", "-o", "json")
		var failed []struct{ Samples, Failed int }
		if err := json.Unmarshal([]byte(out), &failed); err != nil || code != 1 || len(failed) != 1 || failed[0].Samples != 2 || failed[0].Failed != 2 ||
			!strings.Contains(errs, "2 of the sequential samples failed; the first: sample 1:") || !strings.Contains(errs, "exited 3") {
			t.Errorf("bench of a failing command: %d %q %q %v", code, out, errs, err)
		}
		if out := c.must("ls", "-o", "json"); strings.Count(out, `"id"`) != live {
			t.Errorf("a failed bench left sandboxes behind:\n%s", out)
		}

		// A preview's link; the network (this server allows none: the
		// server's refusal, in its words, proves what was asked).
		if out := c.must("preview", sb.ID, "8000", "--ttl", "10m"); !strings.Contains(out, "8000-"+strings.Replace(sb.ID, "_", "-", 1)+".") || !strings.Contains(out, "/v1/sandbox/"+sb.ID+"/ports/8000/") {
			t.Errorf("preview: %s", out)
		}
		if _, errs, code := c.run("", "preview", sb.ID, "http"); code != 2 || !strings.Contains(errs, "not a port") {
			t.Errorf("preview of no port: %d %q", code, errs)
		}
		if _, errs, code := c.run("", "network", sb.ID, "--allow", "pypi.org"); code != 2 || !strings.Contains(errs, "409") && !strings.Contains(errs, "no network") && !strings.Contains(errs, "pypi.org") {
			t.Errorf("network on a sandbox leased with none: %d %q", code, errs)
		}
		if _, errs, code := c.run("", "lease", "--allow", "pypi.org,*.pythonhosted.org", "--port", "443"); code != 2 || !strings.Contains(errs, "pypi.org") {
			t.Errorf("a lease with a network on a server that allows none: %d %q", code, errs)
		}
		if _, errs, code := c.run("", "lease", "--port", "99999"); code != 2 || !strings.Contains(errs, "not a port") {
			t.Errorf("lease --port 99999: %d %q", code, errs)
		}

		// Lifecycle.
		c.must("renew", sb.ID, "--ttl", "20m")
		if out := c.must("sleep", sb.ID, "-o", "json"); !strings.Contains(out, `"sleeping"`) {
			t.Errorf("sleep: %s", out)
		}
		if out := c.must("wake", sb.ID, "-o", "json"); !strings.Contains(out, `"running"`) {
			t.Errorf("wake: %s", out)
		}
		// The old names stay, for scripts written before.
		if out := c.must("pause", sb.ID, "-o", "json"); !strings.Contains(out, `"sleeping"`) {
			t.Errorf("pause: %s", out)
		}
		c.must("resume", sb.ID)
		c.must("stop", sb.ID)
		if out := c.must("end", sb.ID, "--purge"); !strings.Contains(out, "true") {
			t.Errorf("end: %s", out)
		}
		if _, errs, code := c.run("", "get", sb.ID); code != 2 || !strings.Contains(errs, "not found") {
			t.Errorf("get after end: %d %q", code, errs)
		}
	})
}

// TestShell: `sandbox shell` in a real pseudo-terminal (tmux): a command
// typed shows its output at the tty's size, and exit hands back the
// shell's code with the tty restored.
func TestShell(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		testenv.Missing(t, testenv.GVisor, "tmux (scripts/deps.sh installs it for the tests)")
	}
	srv := testenv.Serve(t, gvisor.DefaultRunsc(), []string{"acme"})
	home := t.TempDir()
	c := cli{t: t, bin: srv.Bin, home: home, env: []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "SANDBOX_URL=" + srv.URL, "SANDBOX_KEY=" + srv.Keys["acme"]}}
	var sb struct{ ID string }
	json.Unmarshal([]byte(c.must("lease", "-o", "json")), &sb)

	sock := filepath.Join(home, "tmux.sock")
	tmux := func(args ...string) string {
		cmd := exec.Command("tmux", append([]string{"-S", sock}, args...)...)
		cmd.Env = append(c.env, "TERM=xterm")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v %s", args, err, out)
		}
		return string(out)
	}
	status := filepath.Join(home, "status")
	tmux("new-session", "-d", "-x", "91", "-y", "25", "-s", "t", "sh", "-c", c.bin+" shell "+sb.ID+"; echo exit=$? > "+status+"; stty -a >> "+status+"; sleep 60")
	defer exec.Command("tmux", "-S", sock, "kill-server").Run()
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("%s; the pane:\n%s", what, tmux("capture-pane", "-p", "-t", "t"))
	}
	wait("no prompt", func() bool { return strings.Contains(tmux("capture-pane", "-p", "-t", "t"), "$") })
	tmux("send-keys", "-t", "t", "echo cols=$(tput cols) $((6*7))", "Enter")
	wait("the typed command's output never showed", func() bool { return strings.Contains(tmux("capture-pane", "-p", "-t", "t"), "cols=91 42") })
	tmux("send-keys", "-t", "t", "exit 5", "Enter")
	wait("the shell's end never came back", func() bool { b, _ := os.ReadFile(status); return bytes.Contains(b, []byte("exit=")) })
	b, _ := os.ReadFile(status)
	if !strings.HasPrefix(string(b), "exit=5\n") || !strings.Contains(string(b), " icanon") || !strings.Contains(string(b), " echo") {
		t.Errorf("after the shell: %s", b)
	}
}
