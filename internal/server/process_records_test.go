package server_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/sandboxd/sandbox/internal/service"
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

// TestProcessRecordsBoundedOnRunsc: a sandbox cannot grow its org's store
// through process records. Hundreds of short processes leave at most
// store.MaxProcessRecords records, the ended and forgotten ones pruned
// first; the running ones are never pruned; and with as many running as
// the bound, one more start is refused with a 429.
func TestProcessRecordsBoundedOnRunsc(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 1200})
	max := store.MaxProcessRecords

	var sleepers []int
	for range 3 {
		sleepers = append(sleepers, e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "1200"}}).Pid)
	}
	for i := range max + 60 {
		e.startProcess("acme", id, map[string]any{"argv": []string{"true"}})
		if total, _ := e.processRows(id); total > max {
			t.Fatalf("after %d short processes the store holds %d records of the sandbox (bound %d)", i+1, total, max)
		}
	}
	var list []procAnswer
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil).Body, &list)
	if len(list) > max {
		t.Errorf("the list has %d processes (bound %d)", len(list), max)
	}
	total, _ := e.processRows(id)
	if total > max || total < max-10 {
		t.Errorf("the store holds %d records of the sandbox: want about the bound %d", total, max)
	}
	for _, pid := range sleepers {
		if p := e.process("acme", id, pid); p.Status != service.ProcessRunning {
			t.Errorf("running process %d: %+v (pruned or lost)", pid, p)
		}
	}

	// As many running as the bound: one more is refused, none pruned.
	for range max - len(sleepers) {
		e.startProcess("acme", id, map[string]any{"argv": []string{"sleep", "1200"}})
	}
	r := e.do("POST", "/v1/sandbox/"+id+"/processes", "acme", map[string]any{"argv": []string{"true"}})
	if r.Status != http.StatusTooManyRequests {
		t.Errorf("a start past %d running processes: %d %s", max, r.Status, r.Body)
	}
	if total, running := e.processRows(id); running != max || total != max {
		t.Errorf("with %d running: the store holds %d records, %d running", max, total, running)
	}
	for _, pid := range sleepers {
		if p := e.process("acme", id, pid); p.Status != service.ProcessRunning {
			t.Errorf("running process %d: %+v", pid, p)
		}
	}
}
