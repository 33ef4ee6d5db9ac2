package integration_test

import (
	"database/sql"
	"fmt"
	bg "github.com/sandboxd/sandbox/internal/processes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sandboxd/sandbox/internal/procwire"
	"github.com/sandboxd/sandbox/internal/store"
)

// processRows counts sandbox id's process records in the org stores of
// the server's data directory, read from the files themselves.
func (e *env) processRows(id string) (total, running int) {
	e.t.Helper()
	files, _ := filepath.Glob(filepath.Join(e.data, "orgs", "*", "sandbox.db"))
	if len(files) == 0 {
		e.t.Fatal("no org store in the data directory")
	}
	for _, f := range files {
		db, err := sql.Open("sqlite", "file:"+f+"?mode=ro")
		if err != nil {
			e.t.Fatal(err)
		}
		var n, r int
		err = db.QueryRow(`SELECT count(*), coalesce(sum(ended_at IS NULL AND NOT lost), 0) FROM processes WHERE sandbox_id = ?`, id).Scan(&n, &r)
		db.Close()
		if err != nil {
			e.t.Fatalf("%s: %v", f, err)
		}
		total, running = total+n, running+r
	}
	return total, running
}

// startInside starts n processes of argv from inside sandbox id, through
// its process daemon's socket (as the sandbox's own code may): fast, and
// the server learns of them only when it lists. One Python process asks
// for all n (a `sandbox-runner proc` each was a Go program's start inside
// per process, which a busy CI machine made minutes).
func (e *env) startInside(id string, n int, argv string) {
	e.t.Helper()
	script := fmt.Sprintf(`import json, socket, sys
for i in range(%d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0%s")
    s.sendall(json.dumps({"op": "start", "argv": %s}).encode() + b"\n")
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    s.close()
    if json.loads(answer).get("error"):
        sys.exit("start %%d: %%s" %% (i, answer))
`, n, strings.TrimPrefix(procwire.Socket, "@"), argv)
	if a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", script}, "timeoutSec": 600}); a.ExitCode != 0 {
		e.t.Fatalf("starting %d processes inside: exit %d: %s", n, a.ExitCode, a.Stderr)
	}
}

// TestProcessRecordsBoundedOnRunsc: a sandbox cannot grow its org's store
// through process records. Hundreds of short processes — started through
// the API (whose ends the server never sees) and from inside, listed in
// rounds — leave store.MaxProcessRecords records, the ended and forgotten
// ones pruned first; the running ones are never pruned.
func TestProcessRecordsBoundedOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 1200})
	max := store.MaxProcessRecords

	var sleepers []int
	for range 3 {
		sleepers = append(sleepers, e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "1200"}}).Pid)
	}
	for range 10 {
		e.startProcess("acme", id, map[string]any{"argv": []string{"true"}})
	}
	time.Sleep(2500 * time.Millisecond) // older than a list's race margin
	for round := range 3 {
		start := time.Now()
		e.startInside(id, 128, `["true"]`)
		e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil)
		total, _ := e.processRows(id)
		t.Logf("round %d: %d records (%v)", round, total, time.Since(start))
		if total > max {
			t.Fatalf("after round %d of short processes the store holds %d records of the sandbox (bound %d)", round, total, max)
		}
	}
	// The last round's short processes may still run at its list (a list is
	// a stream of the relay, quicker than they exit): a later list records
	// their end.
	total, running := e.processRows(id)
	for deadline := time.Now().Add(10 * time.Second); running != len(sleepers) && time.Now().Before(deadline); total, running = e.processRows(id) {
		time.Sleep(200 * time.Millisecond)
		e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil)
	}
	if total != max || running != len(sleepers) {
		t.Errorf("the store holds %d records of the sandbox, %d running: want the bound %d, %d running", total, running, max, len(sleepers))
	}
	for _, pid := range sleepers {
		if p := e.process("acme", id, pid); p.Status != bg.ProcessRunning {
			t.Errorf("running process %d: %+v (pruned or lost)", pid, p)
		}
	}

	// Running ones take the place of ended ones, never the reverse. (As
	// many running as the bound is past the sandbox's own limit on tasks:
	// the refusal of one more is TestProcessRecordsBounded's, on the
	// store.)
	e.startInside(id, 64, `["sleep","1200"]`)
	e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil)
	if total, running := e.processRows(id); running != 64+len(sleepers) || total != max {
		t.Errorf("with %d running: the store holds %d records, %d running", 64+len(sleepers), total, running)
	}
	for _, pid := range sleepers {
		if p := e.process("acme", id, pid); p.Status != bg.ProcessRunning {
			t.Errorf("running process %d: %+v", pid, p)
		}
	}
}
