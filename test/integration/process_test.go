package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	bg "github.com/sandboxd/sandbox/internal/processes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
)

type procAnswer struct {
	Pid          int    `json:"pid"`
	Status       string `json:"status"`
	ExitCode     *int   `json:"exitCode"`
	Signal       string `json:"signal"`
	TimedOut     bool   `json:"timedOut"`
	OutputBytes  int64  `json:"outputBytes"`
	DroppedBytes int64  `json:"droppedBytes"`
	StdinOpen    bool   `json:"stdinOpen"`
}

func (e *env) startProcess(org, id string, body map[string]any) procAnswer {
	e.t.Helper()
	var p procAnswer
	if err := json.Unmarshal(e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/processes", org, body).Body, &p); err != nil || p.Pid <= 0 {
		e.t.Fatalf("start answer: %v %+v", err, p)
	}
	return p
}

func (e *env) process(org, id string, pid int) procAnswer {
	e.t.Helper()
	var p procAnswer
	json.Unmarshal(e.must(http.StatusOK, "GET", fmt.Sprintf("/v1/sandbox/%s/processes/%d", id, pid), org, nil).Body, &p)
	return p
}

// waitProcess polls until the process is no longer running.
func (e *env) waitProcess(org, id string, pid int) procAnswer {
	e.t.Helper()
	for range 300 { // the tests beside it (parallel_test.go) slow the sandbox
		if p := e.process(org, id, pid); p.Status != bg.ProcessRunning {
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("process %d still runs after 30 s", pid)
	return procAnswer{}
}

type outEvent struct {
	ID, Event, Data string
}

// events opens a process's output stream (resuming after last when it is
// not empty) and sends its events on the channel, closed at the stream's
// end; cancel disconnects.
func (e *env) events(ctx context.Context, org, id string, pid int, last string) <-chan outEvent {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/sandbox/%s/processes/%d/output", e.http.URL, id, pid), nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[org])
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("output stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	ch := make(chan outEvent, 64)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		var ev outEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Event != "" {
					ch <- ev
				}
				ev = outEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[6:]
			}
		}
	}()
	return ch
}

func stdoutOf(t *testing.T, ev outEvent) string {
	var c struct{ Stdout, Stderr string }
	if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
		t.Fatalf("event data %q: %v", ev.Data, err)
	}
	return c.Stdout + c.Stderr
}

// TestProcesses: background processes on the real runtime — they
// outlive their caller, their output is read again from the start after a
// disconnect, they take stdin and signals, their records outlive a server
// restart, stop kills them, and a flood of output keeps only the ring.
func TestProcesses(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		sleeper := e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "600"}})
		reader := e.startProcess("acme", id, map[string]any{"argv": []string{"cat"}, "stdin": "first\n"})
		ticker := e.startProcess("acme", id, map[string]any{"command": "for i in 1 2 3 4; do echo line $i; sleep 1; done; echo gone >&2"})

		// Read the ticker's first line, then drop the connection.
		ctx, cancel := context.WithCancel(t.Context())
		first := <-e.events(ctx, "acme", id, ticker.Pid, "")
		cancel()
		if first.Event != "stdout" || stdoutOf(t, first) != "line 1\n" || first.ID != "7" {
			t.Fatalf("first event: %+v", first)
		}
		// From the start again: everything, in order, though nobody read while
		// it ran; and after the first id: the rest.
		var all, rest strings.Builder
		var end outEvent
		for ev := range e.events(t.Context(), "acme", id, ticker.Pid, "") {
			if ev.Event == "end" {
				end = ev
				continue
			}
			all.WriteString(stdoutOf(t, ev))
		}
		if want := "line 1\nline 2\nline 3\nline 4\ngone\n"; all.String() != want {
			t.Errorf("the whole output: %q, want %q", all.String(), want)
		}
		var ended procAnswer
		if json.Unmarshal([]byte(end.Data), &ended); ended.Status != "exited" || ended.ExitCode == nil || *ended.ExitCode != 0 {
			t.Errorf("end event: %+v", end)
		}
		for ev := range e.events(t.Context(), "acme", id, ticker.Pid, first.ID) {
			if ev.Event != "end" {
				rest.WriteString(stdoutOf(t, ev))
			}
		}
		if rest.String() != "line 2\nline 3\nline 4\ngone\n" {
			t.Errorf("after id %s: %q", first.ID, rest.String())
		}

		// Stdin: what is sent comes back from cat; eof ends it.
		path := fmt.Sprintf("/v1/sandbox/%s/processes/%d", id, reader.Pid)
		e.must(http.StatusOK, "POST", path+"/stdin", "acme", "second\n")
		e.must(http.StatusOK, "POST", path+"/stdin?eof=1", "acme", "third\n")
		if p := e.waitProcess("acme", id, reader.Pid); *p.ExitCode != 0 {
			t.Errorf("cat after eof: %+v", p)
		}
		var out struct {
			Stdout string `json:"stdout"`
			Next   int64  `json:"next"`
		}
		req, _ := http.NewRequest("GET", e.http.URL+path+"/output", nil)
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		req.Header.Set("Accept", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		if out.Stdout != "first\nsecond\nthird\n" || out.Next != 19 {
			t.Errorf("cat's output: %+v", out)
		}
		e.must(http.StatusConflict, "POST", path+"/stdin", "acme", "late\n")

		// A signal reaches the process (TERM: exit 143).
		e.must(http.StatusOK, "POST", fmt.Sprintf("/v1/sandbox/%s/processes/%d/signal", id, sleeper.Pid), "acme", map[string]string{"signal": "TERM"})
		if p := e.waitProcess("acme", id, sleeper.Pid); p.Signal != "SIGTERM" || *p.ExitCode != 143 {
			t.Errorf("after TERM: %+v", p)
		}
		e.must(http.StatusBadRequest, "POST", fmt.Sprintf("/v1/sandbox/%s/processes/%d/signal", id, sleeper.Pid), "acme", map[string]string{"signal": "BOGUS"})

		// Another org sees nothing of it.
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/processes", "globex", nil)
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/processes", "globex", map[string]any{"argv": []string{"true"}})
		e.must(http.StatusNotFound, "GET", fmt.Sprintf("/v1/sandbox/%s/processes/%d/output", id, ticker.Pid), "globex", nil)
		e.must(http.StatusNotFound, "GET", fmt.Sprintf("/v1/sandbox/%s/processes/99999", id), "acme", nil)
		e.must(http.StatusBadRequest, "POST", "/v1/sandbox/"+id+"/processes", "acme", map[string]any{"argv": []string{"no-such-program"}})

		// A restart of the server: the running process still runs, the
		// finished ones keep their ends.
		long := e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "600"}})
		e.restart(t)
		if p := e.process("acme", id, long.Pid); p.Status != "running" {
			t.Errorf("after a restart, the long process: %+v", p)
		}
		if p := e.process("acme", id, sleeper.Pid); p.Signal != "SIGTERM" {
			t.Errorf("after a restart, the signalled one: %+v", p)
		}
		var list struct{ Processes []procAnswer }
		json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil).Body, &list)
		if len(list.Processes) != 4 {
			t.Errorf("list after restart: %+v", list)
		}

		// Stop kills it, and its record says so.
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/stop", "acme", nil)
		if p := e.waitProcess("acme", id, long.Pid); p.Signal != "SIGKILL" || *p.ExitCode != 137 {
			t.Errorf("after stop: %+v", p)
		}

		// 10 MB of output: the ring keeps the last 1 MiB and says what it
		// dropped, in the record and first thing in the stream.
		flood := e.startProcess("acme", id, map[string]any{"command": "head -c 10000000 /dev/zero | tr '\\0' x"})
		p := e.waitProcess("acme", id, flood.Pid)
		if p.OutputBytes != 10000000 || p.DroppedBytes != 10000000-bg.ProcessRingBytes {
			t.Errorf("after 10 MB: %+v", p)
		}
		n, dropped := 0, ""
		for ev := range e.events(t.Context(), "acme", id, flood.Pid, "") {
			switch ev.Event {
			case "dropped":
				if n == 0 {
					dropped = ev.Data
				}
			case "stdout":
				n += len(stdoutOf(t, ev))
			}
		}
		if n != bg.ProcessRingBytes || dropped != fmt.Sprintf(`{"droppedBytes":%d}`, 10000000-bg.ProcessRingBytes) {
			t.Errorf("stream of the flood: %d bytes, dropped event %q", n, dropped)
		}

		// Ending the sandbox ends them and their records.
		e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "600"}})
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil)
	})
}

// TestProcessKeepsSandboxAwake: a running background process is use — the
// idle sleep leaves its sandbox alone — and once it has ended the sandbox
// sleeps; a process survives an explicit sleep and counts on after the
// wake where its memory was checkpointed with the sandbox, and is lost,
// and says so, where the backend keeps no memory.
func TestProcessKeepsSandboxAwake(t *testing.T) {
	onBackends(t, server.Config{Reaper: reaper.Config{IdleAfter: time.Second}}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		counter := e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-u", "-c",
			"import time\nn = 0\nwhile True:\n    n += 1\n    print(n)\n    time.sleep(0.2)"}})
		time.Sleep(1200 * time.Millisecond)
		e.srv.Reaper.Once(t.Context())
		if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "running" {
			t.Fatalf("a sandbox with a running process was put to sleep: %v", sb)
		}
		if !e.has(runtime.CapCheckpoint) {
			// Without checkpoints a sleep keeps the files, not the memory:
			// the wake says so, and the process's record says it was lost.
			e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/sleep", "acme", nil)
			if sb := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/wake", "acme", nil).JSON(t); sb["memoryKept"] != false {
				t.Errorf("a wake without a checkpoint: %v", sb)
			}
			if p := e.process("acme", id, counter.Pid); p.Status != "lost" {
				t.Errorf("a process after a sleep that kept no memory: %+v", p)
			}
			return
		}
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		before := e.process("acme", id, counter.Pid) // answered from the record: no wake
		if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "sleeping" || before.Status != "running" {
			t.Fatalf("after pause: %v, process %+v", sb, before)
		}
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/resume", "acme", nil)
		out1 := e.process("acme", id, counter.Pid).OutputBytes
		time.Sleep(600 * time.Millisecond)
		if out2 := e.process("acme", id, counter.Pid); out2.Status != "running" || out2.OutputBytes <= out1 {
			t.Fatalf("the process did not count on after the wake: %d then %+v", out1, out2)
		}
		e.must(http.StatusOK, "POST", fmt.Sprintf("/v1/sandbox/%s/processes/%d/signal", id, counter.Pid), "acme", map[string]string{"signal": "KILL"})
		e.waitProcess("acme", id, counter.Pid)
		time.Sleep(1200 * time.Millisecond)
		e.srv.Reaper.Once(t.Context())
		if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "sleeping" {
			t.Errorf("idle with its process ended, the sandbox still runs: %v", sb)
		}
	})
}

// TestProcessTTY: a tty process sees its terminal's size, and a
// resize reaches it.
func TestProcessTTY(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		p := e.startProcess("acme", id, map[string]any{"command": "stty size; read x; stty size", "tty": true, "cols": 100, "rows": 30})
		path := fmt.Sprintf("/v1/sandbox/%s/processes/%d", id, p.Pid)
		// The first size is read before the resize (on a loaded machine the
		// resize once won the race and the first stty saw it).
		for i := 0; e.process("acme", id, p.Pid).OutputBytes == 0; i++ {
			if i == 300 {
				t.Fatal("the first stty printed nothing")
			}
			time.Sleep(50 * time.Millisecond)
		}
		e.must(http.StatusOK, "POST", path+"/resize", "acme", map[string]int{"cols": 120, "rows": 40})
		e.must(http.StatusOK, "POST", path+"/stdin", "acme", "go\r")
		e.waitProcess("acme", id, p.Pid)
		var out strings.Builder
		for ev := range e.events(t.Context(), "acme", id, p.Pid, "") {
			if ev.Event == "stdout" {
				out.WriteString(stdoutOf(t, ev))
			}
		}
		if s := out.String(); !strings.Contains(s, "30 100") || !strings.Contains(s, "40 120") {
			t.Errorf("tty output: %q", s)
		}
		e.must(http.StatusBadRequest, "POST", path+"/resize", "acme", map[string]int{"cols": 0, "rows": 40})
		// A process's timeoutSec kills it (and what it started): 124, timedOut.
		timed := e.startProcess("acme", id, map[string]any{"command": "sleep 300 & sleep 300", "timeoutSec": 1})
		if p := e.waitProcess("acme", id, timed.Pid); !p.TimedOut || *p.ExitCode != 124 {
			t.Errorf("after its timeout: %+v", p)
		}
		if out := e.sh("acme", id, "ps -eo args | grep -c '^sleep 300' || true"); out != "0\n" {
			t.Errorf("the timed-out process's group runs on: %q", out)
		}
		plain := e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "60"}})
		e.must(http.StatusConflict, "POST", fmt.Sprintf("/v1/sandbox/%s/processes/%d/resize", id, plain.Pid), "acme", map[string]int{"cols": 80, "rows": 24})
	})
}
