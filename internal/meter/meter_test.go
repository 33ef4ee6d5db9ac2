package meter

import (
	"context"
	"errors"
	"flag"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

func TestFeeFlag(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--fee", "5", "--fee", "dev=100", "--fee", "desktop=0"}); err != nil {
		t.Fatal(err)
	}
	for class, want := range map[string]int64{"exec": 5, "dev": 100, "desktop": 0, "android": 5} {
		if got := c.Fees.For(class); got != want {
			t.Errorf("fee of %s = %d, want %d", class, got, want)
		}
	}
	if s := fs.Lookup("fee").Value.String(); s != "5,desktop=0,dev=100" {
		t.Errorf("shown as %q", s)
	}
	if f := (Fees{}); f.For("exec") != 0 || f.For("dev") != 0 {
		t.Error("fees must default to zero")
	}
	// A typo refuses the start; it never means free.
	for _, v := range []string{"", "x", "-1", "1.5", "99999999999999999999", "dve=3", "dev=", "=3", "dev=-1"} {
		var f Fees
		if err := f.Set(v); err == nil {
			t.Errorf("--fee %q accepted: %+v", v, f)
		}
	}
	env := map[string]string{"SANDBOX_FEE_CENTS_DEV": "100"}
	if got := EnvFees(func(k string) string { return env[k] }); len(got) != 1 || got[0] != "SANDBOX_FEE_CENTS_DEV" {
		t.Errorf("the old variables set: %v", got)
	}
}

// memLedger is a pure in-memory ledger for the unit test of Charge's logic;
// the store's SQLite ledger is tested through the API.
type memLedger struct {
	mu sync.Mutex
	b  map[string]int64
}

func (l *memLedger) Debit(_ context.Context, org string, c int64) (bool, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b[org] < c {
		return false, l.b[org], nil
	}
	l.b[org] -= c
	return true, l.b[org], nil
}

func (l *memLedger) Credit(_ context.Context, org string, c int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b[org] += c
	return l.b[org], nil
}

func TestCharge(t *testing.T) {
	l := &memLedger{b: map[string]int64{"rich": 10}}
	m := &Meter{Fees: Fees{Default: 4}, Ledger: l}
	ctx := context.Background()
	refund, err := m.Charge(ctx, "rich", Kind, "exec")
	if err != nil || l.b["rich"] != 6 {
		t.Fatalf("charge: %v, balance %d", err, l.b["rich"])
	}
	refund(ctx)
	if l.b["rich"] != 10 {
		t.Errorf("refund: balance %d", l.b["rich"])
	}
	if _, err := m.Charge(ctx, "poor", Kind, "exec"); !errors.Is(err, sandbox.ErrPayment) {
		t.Errorf("poor org: %v", err)
	}
	free := &Meter{Fees: Fees{}, Ledger: l}
	if _, err := free.Charge(ctx, "poor", Kind, "dev"); err != nil {
		t.Errorf("free lease refused: %v", err)
	}
}
