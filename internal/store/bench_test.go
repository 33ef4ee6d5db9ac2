package store

import (
	"context"
	"testing"

	"github.com/sandboxd/sandbox/internal/quota"
)

// The quota checks' own cost on the real SQLite store: what a lease adds
// (Use, over an org with 16 live sandboxes and a project) and what every
// command adds (OrgQuota, the operator's override, read each time so that a
// change applies at once).
func BenchmarkQuotaUse(b *testing.B) {
	st, _ := openStore(b)
	ctx := orgCtx("acme")
	for i := range 16 {
		p := ""
		if i == 0 {
			p = "proj"
		}
		st.Insert(ctx, newRow("exec", p), nil)
	}
	for b.Loop() {
		if _, _, err := st.Use(ctx, "proj"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOrgQuota(b *testing.B) {
	st, _ := openStore(b)
	two := 2
	st.SetOrgQuota(context.Background(), "acme", quota.Policy{Projects: &two})
	for b.Loop() {
		if _, err := st.OrgQuota(context.Background(), "acme"); err != nil {
			b.Fatal(err)
		}
	}
}
