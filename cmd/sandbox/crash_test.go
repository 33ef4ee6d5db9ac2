package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/warm"
)

// server is one `sandbox serve` process of the real binary.
type serverProc struct {
	cmd  *exec.Cmd
	base string
}

func startServer(t *testing.T, bin, data string) *serverProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data", data, "--listen", "127.0.0.1:0", "--images", images(),
		"--reap-every", "1h", "--sweep-grace", "1ns")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("serve printed nothing: %v", err)
	}
	go io.Copy(io.Discard, out)
	return &serverProc{cmd: cmd, base: strings.TrimSpace(strings.TrimPrefix(line, "sandbox: listening on "))}
}

type rawClient struct {
	base, key string
	http      *http.Client
}

func (c rawClient) call(method, path, body string) (int, map[string]any, error) {
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.key)
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var m map[string]any
	json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m, nil
}

// TestSIGKILLInTheMiddle kills the server with SIGKILL while leases and
// execs are in flight, starts it again on the same data directory, and
// checks that every row agrees with reality, that one sweep leaves no
// orphan, and that every lease that was answered 201 still works.
func TestSIGKILLInTheMiddle(t *testing.T) {
	testenv.NeedGVisor(t, gvisor.DefaultRunsc(), "exec")
	bin := filepath.Join(t.TempDir(), "sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data, err := os.MkdirTemp("", "sbk-")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(data, "runtime", "runsc")
	defer func() {
		// Leave nothing running: every container of this data directory.
		out, err := exec.Command(gvisor.DefaultRunsc(), "--root", root, "list", "-quiet").Output()
		if err != nil {
			t.Errorf("listing leftovers: %v", err)
		}
		for _, id := range strings.Fields(string(out)) {
			if out, err := exec.Command(gvisor.DefaultRunsc(), "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				t.Errorf("deleting %s: %v: %s", id, err, out)
			}
		}
		// Nothing of this data directory may outlive the test.
		if out, _ := exec.Command("pgrep", "-f", "root="+root).Output(); len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("runsc processes of this test still run: %s", out)
			exec.Command("pkill", "-9", "-f", "root="+root).Run()
		}
		// Project volumes stay mounted while their sandboxes were alive (the
		// killed server never released them); unmount everything below data.
		if raw, err := os.ReadFile("/proc/self/mounts"); err == nil {
			var below []string
			for _, line := range strings.Split(string(raw), "\n") {
				if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], data+"/") {
					below = append(below, f[1])
				}
			}
			slices.Sort(below)
			for _, m := range slices.Backward(below) {
				if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
					t.Errorf("unmounting %s: %v", m, err)
				}
			}
		}
		os.RemoveAll(data)
	}()
	keyOut, err := exec.Command(bin, "keys", "create", "--data", data, "--org", "acme").Output()
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, bin, data)
	c := rawClient{base: srv.base, key: strings.TrimSpace(string(keyOut)), http: &http.Client{Timeout: time.Minute}}

	// Six workers lease, exec, and lease again until the kill.
	var mu sync.Mutex
	var leased []string // answered 201
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				code, sb, err := c.call("POST", "/v1/sandbox", fmt.Sprintf(`{"project":"w%d-%d"}`, w, i))
				if err != nil {
					return // the server died
				}
				if code != http.StatusCreated {
					continue
				}
				id := sb["id"].(string)
				if _, _, err := c.call("POST", "/v1/sandbox/"+id+"/exec", `{"command":"echo hi > f; sleep 0.1"}`); err != nil {
					return
				}
				// Churn: every other lease ends again, so leases, execs and
				// ends are all in flight when the kill comes.
				if i%2 == 1 {
					code, _, err := c.call("DELETE", "/v1/sandbox/"+id, "")
					if err != nil {
						return // unknown outcome: neither kept nor ended for sure
					}
					if code == http.StatusOK {
						continue
					}
				}
				mu.Lock()
				leased = append(leased, id)
				mu.Unlock()
			}
		}(w)
	}
	// The kill comes once a few leases have been answered (a fixed wait
	// proved nothing on a loaded machine), with the workers' next calls in
	// flight.
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(leased)
		mu.Unlock()
		if n >= 3 {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()
	close(stop)
	wg.Wait()
	if len(leased) < 3 {
		t.Fatalf("only %d leases before the kill; the test proves nothing", len(leased))
	}

	srv = startServer(t, bin, data)
	defer func() { srv.cmd.Process.Signal(syscall.SIGTERM); srv.cmd.Wait() }()
	c.base = srv.base

	code, list, err := c.call("GET", "/v1/sandbox", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("list after restart: %d %v", code, err)
	}
	rows := list["sandboxes"].([]any)
	byID := map[string]string{}
	running := 0
	for _, r := range rows {
		sb := r.(map[string]any)
		byID[sb["id"].(string)] = sb["status"].(string)
		switch sb["status"] {
		case "running":
			running++
		case "pending":
			t.Errorf("row %s still pending after recovery", sb["id"])
		}
	}
	// Every lease answered 201 is still there and usable, with its file.
	for _, id := range leased {
		if byID[id] == "" {
			t.Errorf("lease %s (answered 201) lost", id)
			continue
		}
		if code, res, err := c.call("POST", "/v1/sandbox/"+id+"/exec", `{"command":"true"}`); err != nil || code != http.StatusOK || res["exitCode"] != float64(0) {
			t.Errorf("lease %s unusable after restart: %d %v %v", id, code, res, err)
		}
	}
	// No orphan: the running containers are exactly the running rows and
	// the warm pool's (the first reap and sweep run in the background right
	// after the start; the pool deletes the killed server's warm ones).
	alive, warmed := -1, 0
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command(gvisor.DefaultRunsc(), "--root", root, "list", "--format=json").Output()
		if err != nil {
			t.Fatal(err)
		}
		var states []struct{ ID, Status string }
		json.Unmarshal(out, &states)
		alive, warmed = 0, 0
		for _, s := range states {
			if s.Status != "running" {
				continue
			}
			var m struct{ Labels map[string]string }
			b, _ := os.ReadFile(filepath.Join(data, "runtime", "bundles", s.ID, "meta.json"))
			if json.Unmarshal(b, &m) == nil && m.Labels[warm.Label] != "" {
				warmed++
			} else {
				alive++
			}
		}
		if alive == running && warmed <= warm.DefaultSize {
			break
		}
	}
	if alive != running || warmed > warm.DefaultSize {
		t.Errorf("%d running containers (and %d warm) for %d running rows (rows %v)", alive, warmed, running, byID)
	}
	t.Logf("%d leases answered before SIGKILL; after restart %d rows, %d running", len(leased), len(rows), running)
	c.http.CloseIdleConnections()
}
