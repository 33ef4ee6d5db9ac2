package client_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// cutting breaks the first output stream it carries after its first event
// (the connection "drops"), and records the Last-Event-ID... of every
// output request: what the client resumed from.
type cutting struct {
	next   http.RoundTripper
	suffix string // of the streams' paths: "" is "/output"
	mu     sync.Mutex
	cut    bool
	from   []string
}

func (c *cutting) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, cmp.Or(c.suffix, "/output")) || res.Header.Get("Content-Type") != "text/event-stream" {
		return res, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.from = append(c.from, req.URL.Query().Get("from")+req.Header.Get("Last-Event-ID"))
	if !c.cut {
		c.cut = true
		// The retry hint, then one event: two blank lines.
		res.Body = &cutAfter{ReadCloser: res.Body, blanks: 2}
	}
	return res, nil
}

func (c *cutting) resumes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.from...)
}

// cutAfter reads until it has passed blanks blank lines ("\n\n"), then
// fails as a dropped connection does.
type cutAfter struct {
	io.ReadCloser
	blanks int
	prev   byte
	buf    []byte
}

func (c *cutAfter) Read(p []byte) (int, error) {
	if c.blanks == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if len(c.buf) == 0 {
		b := make([]byte, 4096)
		n, err := c.ReadCloser.Read(b)
		if n == 0 {
			return 0, err
		}
		c.buf = b[:n]
	}
	n := 0
	for n < len(p) && n < len(c.buf) && c.blanks > 0 {
		p[n] = c.buf[n]
		if p[n] == '\n' && c.prev == '\n' {
			c.blanks--
		}
		c.prev = p[n]
		n++
	}
	c.buf = c.buf[n:]
	return n, nil
}

// TestProcesses: the background process calls of the Go client on the real
// server and runtime — start, list, get, the output followed across a
// dropped connection (resumed after the last event, each byte once), the
// output at once from an offset, stdin, a signal, a tty's resize.
func TestProcesses(t *testing.T) {
	backends(t, func(t *testing.T, c *client.Client, s *testenv.Server, backend string) {
		cut := &cutting{next: c.HTTP.Transport}
		c.HTTP = &http.Client{Transport: cut}
		ctx := context.Background()
		sb, err := c.Lease(ctx, client.LeaseRequest{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.End(ctx, sb.ID, false)

		ticker, err := c.StartProcess(ctx, sb.ID, client.ProcessRequest{Command: "for i in 1 2 3; do echo line $i; sleep 0.5; done; echo gone >&2; exit 3"})
		if err != nil || ticker.Pid <= 0 || !ticker.Running() || ticker.Argv[0] != "sh" {
			t.Fatalf("start: %+v %v", ticker, err)
		}
		var out bytes.Buffer
		var kinds []string
		var end *client.Process
		first := -1 // the bytes of the one event before the drop: one line, or more if they came before the follower
		err = c.ProcessOutput(ctx, sb.ID, ticker.Pid, 0, func(ev client.ProcessEvent) error {
			kinds = append(kinds, ev.Kind)
			if first < 0 {
				first = len(ev.Data)
			}
			out.Write(ev.Data)
			if ev.Kind == "end" {
				end = ev.Process
			}
			return nil
		})
		if err != nil || out.String() != "line 1\nline 2\nline 3\ngone\n" || end == nil || end.ExitCode == nil || *end.ExitCode != 3 {
			t.Errorf("followed output: %q %v, end %+v, events %v", out.String(), err, end, kinds)
		}
		if r := cut.resumes(); len(r) != 2 || r[0] != "" || r[1] != strconv.Itoa(first) || first%7 != 0 || first == 0 {
			t.Errorf("the output requests resumed from %q, want the start then %d (after the event before the drop, whole lines)", r, first)
		}

		// From an offset: only what came after it, streamed and at once.
		var rest bytes.Buffer
		stop := errors.New("enough")
		err = c.ProcessOutput(ctx, sb.ID, ticker.Pid, 14, func(ev client.ProcessEvent) error {
			rest.Write(ev.Data)
			if ev.Kind == "end" {
				return stop
			}
			return nil
		})
		if err != stop || rest.String() != "line 3\ngone\n" {
			t.Errorf("output after 14: %q %v", rest.String(), err)
		}
		if o, err := c.ProcessOutputText(ctx, sb.ID, ticker.Pid, 7); err != nil || o.Stdout != "line 2\nline 3\n" || o.Stderr != "gone\n" ||
			o.Next != 26 || o.Process == nil || o.Process.Status != "exited" {
			t.Errorf("output text after 7: %+v %v", o, err)
		}

		// Stdin, then eof: cat hands it back.
		cat, err := c.StartProcess(ctx, sb.ID, client.ProcessRequest{Argv: []string{"cat"}, Stdin: "a\n"})
		if err != nil {
			t.Fatal(err)
		}
		if w, err := c.ProcessStdin(ctx, sb.ID, cat.Pid, strings.NewReader("b\x00\xff\n"), true); err != nil || w.Written != 4 {
			t.Errorf("stdin: %+v %v", w, err)
		}
		p := wait(t, c, sb.ID, cat.Pid)
		if o, err := c.ProcessOutputText(ctx, sb.ID, cat.Pid, 0); err != nil || !bytes.Equal(o.StdoutBytes(), []byte("a\nb\x00\xff\n")) || o.StdoutBase64 == "" {
			t.Errorf("cat's output: %+v %v (process %+v)", o, err, p)
		}
		if _, err := c.ProcessStdin(ctx, sb.ID, cat.Pid, strings.NewReader("late"), false); client.StatusOf(err) != 409 {
			t.Errorf("stdin after eof: %v", err)
		}

		// A tty: resized, it sees the size; then a signal ends it.
		tty, err := c.StartProcess(ctx, sb.ID, client.ProcessRequest{TTY: true, Cols: 80, Rows: 24,
			Command: "trap 'stty size; exit 0' USR1; echo ready; while :; do sleep 0.1; done"})
		if err != nil || !tty.TTY {
			t.Fatalf("tty: %+v %v", tty, err)
		}
		ready := errors.New("ready")
		if err := c.ProcessOutput(ctx, sb.ID, tty.Pid, 0, func(ev client.ProcessEvent) error {
			if bytes.Contains(ev.Data, []byte("ready")) {
				return ready // the trap is set
			}
			return nil
		}); err != ready {
			t.Fatalf("the tty process never got ready: %v", err)
		}
		if _, err := c.ResizeProcess(ctx, sb.ID, tty.Pid, 120, 40); err != nil {
			t.Errorf("resize: %v", err)
		}
		if _, err := c.SignalProcess(ctx, sb.ID, tty.Pid, "USR1"); err != nil {
			t.Errorf("signal: %v", err)
		}
		wait(t, c, sb.ID, tty.Pid)
		if o, err := c.ProcessOutputText(ctx, sb.ID, tty.Pid, 0); err != nil || !strings.Contains(o.Stdout, "40 120") {
			t.Errorf("the tty after a resize: %+v %v", o, err)
		}
		sleeper, err := c.StartProcess(ctx, sb.ID, client.ProcessRequest{Argv: []string{"sleep", "600"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SignalProcess(ctx, sb.ID, sleeper.Pid, "TERM"); err != nil {
			t.Errorf("signal: %v", err)
		}
		if p := wait(t, c, sb.ID, sleeper.Pid); p.Signal != "SIGTERM" || *p.ExitCode != 143 {
			t.Errorf("after TERM: %+v", p)
		}
		if _, err := c.SignalProcess(ctx, sb.ID, sleeper.Pid, "BOGUS"); client.StatusOf(err) != 400 {
			t.Errorf("a bogus signal: %v", err)
		}

		list, err := c.Processes(ctx, sb.ID)
		if err != nil || len(list) != 4 || list[0].Pid != ticker.Pid || list[3].Pid != sleeper.Pid {
			t.Errorf("list: %+v %v", list, err)
		}
		if _, err := c.Process(ctx, sb.ID, 99999); !client.IsNotFound(err) {
			t.Errorf("an unknown pid: %v", err)
		}
		if err := c.ProcessOutput(ctx, sb.ID, 99999, 0, func(client.ProcessEvent) error { return nil }); !client.IsNotFound(err) {
			t.Errorf("the output of an unknown pid: %v", err)
		}
	})
}

// wait polls until the process has ended.
func wait(t *testing.T, c *client.Client, id string, pid int) *client.Process {
	t.Helper()
	for range 100 {
		p, err := c.Process(context.Background(), id, pid)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Running() {
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("process %d still runs after 10 s", pid)
	return nil
}

// TestFork: Fork on the real server: the fork has the original's files and
// its running process (on gVisor; on pods, memoryKept false), its own id
// and metadata; a project for a sandbox
// without one is refused with the server's message.
func TestFork(t *testing.T) {
	backends(t, func(t *testing.T, c *client.Client, s *testenv.Server, backend string) {
		ctx := context.Background()
		sb, err := c.Lease(ctx, client.LeaseRequest{Metadata: map[string]string{"side": "original"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.End(ctx, sb.ID, false)
		if _, err := c.WriteFile(ctx, sb.ID, "f.txt", strings.NewReader("before the fork")); err != nil {
			t.Fatal(err)
		}
		sleeper, err := c.StartProcess(ctx, sb.ID, client.ProcessRequest{Argv: []string{"sleep", "600"}})
		if err != nil {
			t.Fatal(err)
		}
		fork, err := c.Fork(ctx, sb.ID, client.ForkRequest{TTLSec: 600, Metadata: map[string]string{"side": "fork"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.End(ctx, fork.ID, false)
		if fork.ID == sb.ID || fork.Status != "running" || fork.Class != sb.Class || fork.Metadata["side"] != "fork" || fork.Expires().Sub(fork.Created()) < 590*time.Second {
			t.Errorf("fork: %+v", fork)
		}
		f, err := c.ReadFile(ctx, fork.ID, "f.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "before the fork" {
			t.Errorf("the fork's file: %q", b)
		}
		// gVisor forks the memory: the process runs on in the fork. A pod's
		// fork is its files only, and says so.
		if backend == "gvisor" {
			if p, err := c.Process(ctx, fork.ID, sleeper.Pid); err != nil || !p.Running() {
				t.Errorf("the fork's process: %+v %v", p, err)
			}
		} else if fork.MemoryKept == nil || *fork.MemoryKept {
			t.Errorf("a pod's fork keeps no memory, and must say so: %+v", fork)
		}
		if _, err := c.Fork(ctx, sb.ID, client.ForkRequest{Project: "p"}); client.StatusOf(err) != 400 || !strings.Contains(err.Error(), "no project") {
			t.Errorf("a fork with a project of a sandbox without one: %v", err)
		}
	})
}
