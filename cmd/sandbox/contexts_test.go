package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestCLIContextsAndWatch: ctx new, run (a value on stdout, a figure saved,
// an error's traceback and exit 1, the default context), ls, rm, run-code
// --context, and watch printing a change the sandbox makes, with the
// binary on a real server of each backend.
func TestCLIContextsAndWatch(t *testing.T) {
	backends(t, []string{"acme"}, func(t *testing.T, srv *testenv.Server, backend string) {
		home := t.TempDir()
		c := cli{t: t, bin: srv.Bin, home: home, env: []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "SANDBOX_URL=" + srv.URL, "SANDBOX_KEY=" + srv.Keys["acme"]}}
		var sb struct{ ID string }
		json.Unmarshal([]byte(c.must("lease", "-o", "json")), &sb)

		k := strings.TrimSpace(c.must("ctx", "new", sb.ID))
		if !strings.HasPrefix(k, "ctx_") {
			t.Fatalf("ctx new printed %q", k)
		}
		if out, errs, code := c.run("x = 20\nprint('set')\n", "ctx", "run", sb.ID, k, "-"); code != 0 || out != "set\n" {
			t.Errorf("ctx run: %d %q %q", code, out, errs)
		}
		if out := c.must("ctx", "run", sb.ID, k, writeFile(t, "x * 2 + 2")); out != "42\n" {
			t.Errorf("a value: %q", out)
		}
		dir := t.TempDir()
		if _, errs, code := c.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n", "ctx", "run", sb.ID, k, "-", "--save", dir); code != 0 || !strings.Contains(errs, "result-1.png") {
			t.Errorf("a figure: %d %q", code, errs)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "result-1.png")); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
			t.Errorf("the figure saved: %v %.8q", err, b)
		}
		if _, errs, code := c.run("1/0\n", "ctx", "run", sb.ID, k, "-"); code != 1 || !strings.Contains(errs, "ZeroDivisionError") {
			t.Errorf("an error: %d %q", code, errs)
		}
		if _, errs, code := c.run("x\n", "ctx", "run", sb.ID, "python", "-"); code != 1 || !strings.Contains(errs, "NameError") {
			t.Errorf("the default context sees x: %d %q", code, errs)
		}
		if out := c.must("ctx", "ls", sb.ID); !strings.HasPrefix(out, "ID ") || !strings.Contains(out, k) || !strings.Contains(out, "python ") {
			t.Errorf("ctx ls:\n%s", out)
		}
		c.must("ctx", "rm", sb.ID, k)
		if _, errs, code := c.run("x\n", "ctx", "run", sb.ID, k, "-"); code != 2 || !strings.Contains(errs, "404") {
			t.Errorf("a removed context: %d %q", code, errs)
		}

		// run-code --context keeps a session's variables.
		var first struct {
			SandboxID string `json:"session_id"`
		}
		json.Unmarshal([]byte(c.must("run-code", "--language", "py", "--context", "default", "-o", "json", writeFile(t, "y = 6"))), &first)
		if out := c.must("run-code", "--language", "py", "--context", "default", "--sandbox", first.SandboxID, writeFile(t, "y * 7")); out != "42\n" {
			t.Errorf("run-code --context: %q", out)
		}

		// watch: a line per change until interrupted.
		cmd := exec.Command(c.bin, "watch", sb.ID, "-r")
		cmd.Env = c.env
		out, _ := cmd.StdoutPipe()
		errp, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		if line, _ := bufio.NewReader(errp).ReadString('\n'); !strings.HasPrefix(line, "[watching ") {
			t.Fatalf("watch said %q", line)
		}
		c.must("exec", sb.ID, "--", "sh", "-c", "echo hi > made.txt")
		lines := make(chan string, 4)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		select {
		case l := <-lines:
			if strings.Join(strings.Fields(l), " ") != "created made.txt" {
				t.Errorf("watch printed %q", l)
			}
		case <-time.After(20 * time.Second):
			t.Error("watch printed nothing")
		}
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("watch after ^C: %v", err)
		}
	})
}

func writeFile(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "code.py")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
