package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestCLIProcesses: the background process verbs of the binary on a real
// server and runtime — start (env, dir, tty), ps, send with --eof, output
// at once and followed (the process's exit code is the CLI's), kill, fork,
// and the completion of a pid.
func TestCLIProcesses(t *testing.T) {
	backends(t, []string{"acme"}, func(t *testing.T, srv *testenv.Server, backend string) {
		home := t.TempDir()
		c := cli{t: t, bin: srv.Bin, home: home, env: []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "SANDBOX_URL=" + srv.URL, "SANDBOX_KEY=" + srv.Keys["acme"]}}
		var sb struct{ ID string }
		json.Unmarshal([]byte(c.must("lease", "-o", "json")), &sb)
		c.must("exec", sb.ID, "--", "mkdir", "sub")

		pid := strings.TrimSpace(c.must("start", sb.ID, "--env", "G=hi", "--dir", "sub", "--", "sh", "-c", `echo $G $(basename "$PWD"); read x; echo got-$x; exit 5`))
		if pid == "" || strings.Trim(pid, "0123456789") != "" {
			t.Fatalf("start printed %q, want a pid", pid)
		}
		if out := c.must("ps", sb.ID); !strings.HasPrefix(out, "PID ") || !strings.Contains(out, pid+"  ") || !strings.Contains(out, "running") {
			t.Errorf("ps:\n%s", out)
		}
		if out, errs, code := c.run("yes\n", "send", sb.ID, pid, "--eof"); code != 0 || !strings.Contains(out, " 4 ") || !strings.Contains(out, "closed") {
			t.Errorf("send: %d %q %q", code, out, errs)
		}
		if out, errs, code := c.run("", "output", sb.ID, pid, "-f"); code != 5 || out != "hi sub\ngot-yes\n" {
			t.Errorf("output -f: exit %d %q %q", code, out, errs)
		}
		if out := c.must("output", sb.ID, pid, "--from", "7"); out != "got-yes\n" {
			t.Errorf("output --from 7: %q", out)
		}

		sleeper := strings.TrimSpace(c.must("start", sb.ID, "--", "sleep", "600"))
		if out := c.must("kill", sb.ID, sleeper); !strings.Contains(out, sleeper) {
			t.Errorf("kill: %s", out)
		}
		var list struct {
			Processes []struct {
				Pid    int
				Status string
				Signal string
			}
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			json.Unmarshal([]byte(c.must("ps", sb.ID, "-o", "json")), &list)
			if len(list.Processes) == 2 && list.Processes[1].Status != "running" {
				break
			}
		}
		if len(list.Processes) != 2 || list.Processes[1].Signal != "SIGTERM" {
			t.Errorf("ps after kill: %+v", list)
		}
		if _, errs, code := c.run("", "kill", sb.ID, sleeper, "--signal", "BOGUS"); code != 2 || !strings.Contains(errs, "unknown signal") {
			t.Errorf("kill --signal BOGUS: %d %q", code, errs)
		}
		if _, errs, code := c.run("", "output", sb.ID, "x"); code != 2 || !strings.Contains(errs, "not a pid") {
			t.Errorf("output with no pid: %d %q", code, errs)
		}

		tty := strings.TrimSpace(c.must("start", sb.ID, "--tty", "--", "sh", "-c", "tty; echo oops >&2"))
		if out, _, code := c.run("", "output", sb.ID, tty, "-f"); code != 0 || !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "oops") {
			t.Errorf("a tty process's output: %d %q", code, out)
		}

		// fork: a new sandbox with the original's running process.
		runner := strings.TrimSpace(c.must("start", sb.ID, "--", "sleep", "600"))
		var fork struct {
			ID, Status string
			MemoryKept *bool
		}
		json.Unmarshal([]byte(c.must("fork", sb.ID, "--ttl", "5m", "-o", "json")), &fork)
		if fork.ID == "" || fork.ID == sb.ID || fork.Status != "running" {
			t.Fatalf("fork: %+v", fork)
		}
		if backend == "kube" {
			// A pod's fork is its files only, and says so.
			if fork.MemoryKept == nil || *fork.MemoryKept {
				t.Errorf("a pod's fork must say memoryKept false: %+v", fork)
			}
		} else if out := c.must("ps", fork.ID); !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			f := strings.Fields(l)
			return len(f) > 1 && f[0] == runner && f[1] == "running"
		}) {
			t.Errorf("ps of the fork:\n%s", out)
		}
		if _, errs, code := c.run("", "fork", sb.ID, "--project", "p"); code != 2 || !strings.Contains(errs, "400") {
			t.Errorf("fork --project of a sandbox without one: %d %q", code, errs)
		}

		// Completion of a pid after kill ID.
		script := c.must("completion", "bash")
		cmd := exec.Command("bash", "-c", script+`
	COMP_WORDS=(sandbox kill `+sb.ID+` ""); COMP_CWORD=3; _sandbox; echo "${COMPREPLY[@]}"`)
		cmd.Env = append(c.env, "PATH="+filepath.Dir(c.bin)+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil || !slices.Contains(strings.Fields(string(out)), sleeper) {
			t.Errorf("bash completion of a pid: %v %q", err, out)
		}
	})
}
