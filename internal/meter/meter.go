// Package meter gates and debits every lease through one interface, kind
// "sandbox". Fees are the operator's flags (--fee) and default to zero:
// shipping the meter must not ship a price. A fee that is negative, not a
// number or for no class refuses the server's start: a typo must never
// silently mean free.
package meter

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Kind is the one meter kind this service charges under.
const Kind = "sandbox"

// Fees are the per-lease fees in cents.
type Fees struct {
	Default int64            // every class's, unless ByClass names it
	ByClass map[string]int64 // a class's own
}

// Config is the meter's part of the server's configuration.
type Config struct {
	Fees Fees
}

// RegisterFlags defines the meter's flag on fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Fees, "fee", "the fee of one lease, in cents, debited from the org's balance (sandbox credits add): N for every class, or CLASS=N for one ("+strings.Join(sandbox.ClassNames(), ", ")+"); repeatable; 0 (free) by default")
}

// EnvFees are the environment variables that set fees before --fee did;
// the server refuses to start while one is set, rather than let a lease
// be free that the operator meant to charge for.
func EnvFees(getenv func(string) string) []string {
	var set []string
	for _, k := range append([]string{"SANDBOX_FEE_CENTS"}, feeEnvClasses()...) {
		if getenv(k) != "" {
			set = append(set, k)
		}
	}
	return set
}

func feeEnvClasses() []string {
	var out []string
	for _, c := range sandbox.ClassNames() {
		out = append(out, "SANDBOX_FEE_CENTS_"+strings.ToUpper(c))
	}
	return out
}

// String shows the fees as the flag takes them.
func (f *Fees) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	if f.Default != 0 {
		parts = append(parts, strconv.FormatInt(f.Default, 10))
	}
	for _, c := range sandbox.ClassNames() {
		if n, ok := f.ByClass[c]; ok {
			parts = append(parts, c+"="+strconv.FormatInt(n, 10))
		}
	}
	return strings.Join(parts, ",")
}

// Set takes one --fee: N, or CLASS=N.
func (f *Fees) Set(v string) error {
	class, cents, named := strings.Cut(v, "=")
	if !named {
		class, cents = "", v
	}
	n, err := strconv.ParseInt(strings.TrimSpace(cents), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q: a fee is a whole number of cents, 0 or more", cents)
	}
	if !named {
		f.Default = n
		return nil
	}
	if _, err := sandbox.LookupClass(class); err != nil || class == "" {
		return fmt.Errorf("%q: no such class (%s)", class, strings.Join(sandbox.ClassNames(), ", "))
	}
	if f.ByClass == nil {
		f.ByClass = map[string]int64{}
	}
	f.ByClass[class] = n
	return nil
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
