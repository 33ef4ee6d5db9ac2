package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// ttyHeader is the header of a terminal, then its first size, cols×rows,
// as the kube backend sends one once the caller's terminal says it.
func ttyHeader(env, argv []string, cols, rows uint16) string {
	h, _ := json.Marshal(execHeader{Env: env, Argv: argv, TTY: true})
	return fmt.Sprintf("%08x", len(h)) + string(h) + size(cols, rows)
}

func keys(s string) string {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s)))
	return string(frameData) + string(n[:]) + s
}

func size(cols, rows uint16) string {
	var n [4]byte
	binary.BigEndian.PutUint16(n[:2], cols)
	binary.BigEndian.PutUint16(n[2:], rows)
	return string(frameResize) + string(n[:])
}

// step is input to send once the output says after ("" for at once).
type step struct{ after, send string }

// runTTY runs `sandbox-runner exec` (this test binary as the runner) with
// the steps on its stdin, which it then closes if hangUp, else leaves open
// until the runner ends; it answers the output and the exit code.
func runTTY(t *testing.T, steps []step, hangUp bool) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTTYOrdersSizesWithKeys$")
	cmd.Env = []string{"RUNNER_EXEC_CHILD=1"}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cmd.Stdin = pr
	var mu sync.Mutex
	var out bytes.Buffer
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = outW, outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	outW.Close()
	read := make(chan struct{})
	go func() {
		defer close(read)
		b := make([]byte, 4096)
		for {
			n, err := outR.Read(b)
			mu.Lock()
			out.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		for _, s := range steps {
			for deadline := time.Now().Add(20 * time.Second); s.after != "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				seen := strings.Contains(out.String(), s.after)
				mu.Unlock()
				if seen {
					break
				}
			}
			pw.Write([]byte(s.send))
		}
		if hangUp {
			pw.Close()
		}
	}()
	err = cmd.Wait()
	<-read
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// TestTTYOrdersSizesWithKeys: a terminal's program sees a resize before
// the keys sent after it (the reason the runner holds the terminal) and
// is told of it (SIGWINCH), reads its keys, ends with its own status, and
// is killed when its caller goes (stdin ends).
func TestTTYOrdersSizesWithKeys(t *testing.T) {
	if os.Getenv("RUNNER_EXEC_CHILD") == "1" {
		os.Exit(execMain())
	}
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx here")
	}
	env := []string{"PATH=/usr/bin:/bin", "TERM=dumb", "PS1=$ "}
	out, code := runTTY(t, []step{
		{"", ttyHeader(env, []string{"sh"}, 80, 24) + keys("stty size\n")},
		{"24 80", size(99, 33) + keys("stty size; exit 3\n")},
	}, false)
	if code != 3 || !strings.Contains(out, "33 99") {
		t.Errorf("exit %d, output %q: want the sizes 24 80 then 33 99, exit 3", code, out)
	}
	// A resize with a program in the foreground reaches it (SIGWINCH).
	out, code = runTTY(t, []step{
		{"", ttyHeader(env, []string{"sh", "-c", `trap 'stty size; exit 5' WINCH; echo ready; while :; do sleep 0.05; done`}, 120, 40)},
		{"ready", size(50, 20)},
	}, false)
	if code != 5 || !strings.Contains(out, "20 50") {
		t.Errorf("a resize of a running program: exit %d, output %q, want 20 50 and exit 5", code, out)
	}
	// The caller gone: its program is killed, not left to run.
	start := time.Now()
	out, code = runTTY(t, []step{{"", ttyHeader(env, []string{"sleep", "60"}, 80, 24)}}, true)
	if code != 128+9 || time.Since(start) > 10*time.Second {
		t.Errorf("stdin closed under a running program: exit %d after %v (output %q), want 137 at once", code, time.Since(start), out)
	}
	// Nothing to run: 127, said on the terminal's one stream.
	out, code = runTTY(t, []step{{"", ttyHeader(env, []string{"no-such-program"}, 80, 24)}}, false)
	if code != 127 || !strings.Contains(out, "no-such-program") {
		t.Errorf("a program that is not there: exit %d, output %q, want 127", code, out)
	}
	// Not a frame: the caller is taken as gone.
	out, code = runTTY(t, []step{{"", ttyHeader(env, []string{"sleep", "60"}, 80, 24) + "x0000"}}, false)
	if code != 128+9 {
		t.Errorf("a frame of no type: exit %d, output %q, want 137", code, out)
	}
}

func FuzzTTYFrames(f *testing.F) {
	f.Add([]byte(keys("ls\n") + size(80, 24) + keys("x")))
	f.Add([]byte("d\x00\x01\x00\x01"))
	f.Add([]byte("r\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got bytes.Buffer
		readFrames(bytes.NewReader(b), func(p []byte) error {
			if len(p) == 0 || len(p) > maxFrame {
				t.Fatalf("a frame of %d bytes handed on", len(p))
			}
			got.Write(p)
			return nil
		}, func(cols, rows uint16) {
			if cols == 0 || rows == 0 {
				t.Fatalf("a size of %dx%d handed on", cols, rows)
			}
		})
		if got.Len() > len(b) {
			t.Fatalf("%d bytes of keys out of %d of frames", got.Len(), len(b))
		}
	})
}
