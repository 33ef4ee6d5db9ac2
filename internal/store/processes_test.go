package store

import (
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// TestProcessRecordsBounded: a sandbox's records stay at
// MaxProcessRecords — ended and lost ones pruned oldest first, running
// ones never — and a running record past the bound is refused (a 429).
func TestProcessRecordsBounded(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	sb := newRow("exec", "")
	if err := st.Insert(ctx, sb, nil); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	count := func() (total, running int) {
		recs, err := st.Processes(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.EndedAt.IsZero() && !r.Lost {
				running++
			}
		}
		return len(recs), running
	}
	// The oldest three run; then one lost; then many ended.
	for i := range 3 {
		if err := st.PutProcess(ctx, Process{Sandbox: sb.ID, Boot: "b1", Pid: i + 1, StartedAt: at(i)}); err != nil {
			t.Fatal(err)
		}
	}
	st.PutProcess(ctx, Process{Sandbox: sb.ID, Boot: "b0", Pid: 99, StartedAt: at(3), Lost: true})
	for i := range 2 * MaxProcessRecords {
		if err := st.PutProcess(ctx, Process{Sandbox: sb.ID, Boot: "b1", Pid: 100 + i, StartedAt: at(10 + i), EndedAt: at(11 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if total, running := count(); total != MaxProcessRecords || running != 3 {
		t.Fatalf("after %d ended: %d records, %d running", 2*MaxProcessRecords, total, running)
	}
	recs, _ := st.Processes(ctx, sb.ID)
	if recs[0].Pid != 1 || recs[3].Pid == 99 || recs[len(recs)-1].Pid != 100+2*MaxProcessRecords-1 {
		t.Errorf("kept: first %d, fourth %d, last %d (the lost and the oldest ended go first)", recs[0].Pid, recs[3].Pid, recs[len(recs)-1].Pid)
	}
	// Running ones take the place of ended ones, up to the bound.
	for i := range MaxProcessRecords - 3 {
		if err := st.PutProcess(ctx, Process{Sandbox: sb.ID, Boot: "b1", Pid: 1000 + i, StartedAt: at(1000 + i)}); err != nil {
			t.Fatalf("running %d: %v", i, err)
		}
	}
	if total, running := count(); total != MaxProcessRecords || running != MaxProcessRecords {
		t.Fatalf("%d records, %d running", total, running)
	}
	err := st.PutProcess(ctx, Process{Sandbox: sb.ID, Boot: "b1", Pid: 5000, StartedAt: at(5000)})
	if sandbox.KindOf(err) != sandbox.KindLimit {
		t.Errorf("a running record past the bound: %v", err)
	}
	// An update of a running one (its end) is taken.
	if err := st.PutProcess(ctx, Process{Sandbox: sb.ID, Boot: "b1", Pid: 1, StartedAt: at(0), EndedAt: at(6000)}); err != nil {
		t.Errorf("ending a record at the bound: %v", err)
	}
	if total, running := count(); total != MaxProcessRecords || running != MaxProcessRecords-1 {
		t.Errorf("after a refusal and an end: %d records, %d running", total, running)
	}
}
