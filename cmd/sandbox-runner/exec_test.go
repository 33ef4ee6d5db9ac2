package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// header is what the kube backend writes before a command's stdin.
func header(dir string, env, argv []string) string {
	h, _ := json.Marshal(execHeader{Dir: dir, Env: env, Argv: argv})
	return fmt.Sprintf("%08x", len(h)) + string(h)
}

// TestExecReadsItsHeaderOnly: `sandbox-runner exec` runs the header's
// command in its directory with exactly its environment, and the command
// reads the rest of stdin, not a byte less; the shell wrapper's exit codes
// for a directory it cannot enter (126) and a program not found (127).
func TestExecReadsItsHeaderOnly(t *testing.T) {
	if os.Getenv("RUNNER_EXEC_CHILD") == "1" {
		os.Exit(execMain())
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	run := func(stdin string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestExecReadsItsHeaderOnly$")
		cmd.Env = []string{"RUNNER_EXEC_CHILD=1", "SECRET_OF_THE_RUNNER=1"}
		cmd.Dir = dir
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	env := []string{"PATH=/usr/bin:/bin", "GREETING=hi there"}
	out, errs, code := run(header("sub", env, []string{"sh", "-c", `echo "$GREETING"; pwd; env | sort; cat`}) + "the rest\nof stdin")
	want := "hi there\n" + filepath.Join(dir, "sub") + "\nGREETING=hi there\nPATH=/usr/bin:/bin\nPWD=" + filepath.Join(dir, "sub") + "\nthe rest\nof stdin"
	if code != 0 || out != want {
		t.Errorf("exit %d, stdout %q (stderr %q), want %q", code, out, errs, want)
	}
	if _, _, code := run(header("nowhere", env, []string{"true"})); code != 126 {
		t.Errorf("a directory that is not there: exit %d, want 126", code)
	}
	if _, _, code := run(header("", env, []string{"no-such-program"})); code != 127 {
		t.Errorf("a program that is not there: exit %d, want 127", code)
	}
	// A name that is no file on PATH goes to the image's env(1), which
	// may know it (busybox's applets).
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "env"), []byte("#!/bin/sh\necho \"env ran: $*\"\n"), 0o755)
	out, errs, code = run(header("", []string{"PATH=" + bin + ":/bin", "A=b"}, []string{"applet", "x"}))
	if want := "env ran: -i PATH=" + bin + ":/bin A=b applet x\n"; code != 0 || out != want {
		t.Errorf("a name on no PATH: exit %d, stdout %q (stderr %q), want %q", code, out, errs, want)
	}
	for _, bad := range []string{"", "0000000", "zzzzzzzz{}", "00000002{}", "00ffffff{"} {
		if _, _, code := run(bad); code != 125 {
			t.Errorf("header %q: exit %d, want 125", bad, code)
		}
	}
}

func FuzzExecHeader(f *testing.F) {
	f.Add([]byte(header("d", []string{"A=b"}, []string{"x"})))
	f.Add([]byte("00000002{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := readExecHeader(bytes.NewReader(b))
		if err == nil && (len(h.Argv) == 0 || h.Argv[0] == "") {
			t.Fatalf("a header without argv accepted: %q", b)
		}
	})
}
