// Package meter gates and debits every lease through one interface, kind
// "sandbox". Fees come from the environment and default to zero: shipping
// the meter must not ship a price. A fee that is negative or not a number is
// treated as zero (free), never as an error that would stop the server.
package meter

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Kind is the one meter kind this service charges under.
const Kind = "sandbox"

// Fees are the per-lease fees in cents.
type Fees struct {
	Default int64            // SANDBOX_FEE_CENTS
	ByClass map[string]int64 // SANDBOX_FEE_CENTS_EXEC, _DEV, _DESKTOP, _ANDROID
}

// FeesFromEnv reads the fees through getenv (os.Getenv in the server).
func FeesFromEnv(getenv func(string) string) Fees {
	f := Fees{Default: parseFee(getenv("SANDBOX_FEE_CENTS")), ByClass: map[string]int64{}}
	for _, c := range sandbox.ClassNames() {
		if v := getenv("SANDBOX_FEE_CENTS_" + strings.ToUpper(c)); v != "" {
			f.ByClass[c] = parseFee(v)
		}
	}
	return f
}

// parseFee turns an environment value into cents: anything but a
// non-negative integer is free.
func parseFee(v string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// For returns the fee of one lease of class: its own fee if set, else the
// default.
func (f Fees) For(class string) int64 {
	if n, ok := f.ByClass[class]; ok {
		return n
	}
	return f.Default
}

// Ledger holds org balances. Debit must be atomic: it takes cents only if
// the balance covers them.
type Ledger interface {
	Debit(ctx context.Context, org string, cents int64) (ok bool, balance int64, err error)
	Credit(ctx context.Context, org string, cents int64) (balance int64, err error)
}

// Meter charges leases.
type Meter struct {
	Fees   Fees
	Ledger Ledger
}

// Charge debits the fee of one lease of class for org, or refuses with
// KindPayment. The returned refund gives the fee back when the lease fails
// after the gate (the caller must call it then, and only then).
func (m *Meter) Charge(ctx context.Context, org, kind, class string) (refund func(context.Context) error, err error) {
	fee := m.Fees.For(class)
	if kind != Kind {
		return nil, fmt.Errorf("meter: unknown kind %q", kind)
	}
	if fee == 0 {
		return func(context.Context) error { return nil }, nil
	}
	ok, balance, err := m.Ledger.Debit(ctx, org, fee)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, sandbox.Errorf(sandbox.KindPayment, "a %s sandbox costs %d cents and the org's balance is %d cents", class, fee, balance)
	}
	return func(ctx context.Context) error {
		_, err := m.Ledger.Credit(context.WithoutCancel(ctx), org, fee)
		return err
	}, nil
}
