package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

func TestCheckKeyFormat(t *testing.T) {
	st, _ := openStore(t)
	minted, _, err := st.MintKey(context.Background(), "acme", "t", ScopeTenant, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ok := []string{minted, KeyPrefix + strings.Repeat("a", 52), KeyPrefix + strings.Repeat("z7", 26)}
	for _, k := range ok {
		if err := CheckKeyFormat(k); err != nil {
			t.Errorf("%q refused: %v", k, err)
		}
	}
	bad := []string{"", "sbk_", "sbk" + strings.Repeat("a", 53), KeyPrefix + strings.Repeat("a", 51), KeyPrefix + strings.Repeat("a", 53),
		KeyPrefix + strings.Repeat("A", 52), KeyPrefix + strings.Repeat("a", 51) + "1", KeyPrefix + strings.Repeat("a", 51) + "8",
		"SBK_" + strings.Repeat("a", 52), KeyPrefix + strings.Repeat("a", 51) + "\n"}
	for _, k := range bad {
		err := CheckKeyFormat(k)
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%q: want invalid, got %v", k, err)
			continue
		}
		if len(k) > 8 && strings.Contains(err.Error(), k[4:]) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}

func TestEnsureKey(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	secret := KeyPrefix + strings.Repeat("q", 26) + strings.Repeat("4", 26)
	k, created, err := st.EnsureKey(ctx, "system", "bootstrap", ScopeAdmin, secret)
	if err != nil || !created {
		t.Fatalf("first ensure: created %v, %v", created, err)
	}
	p, err := st.Principal(ctx, secret)
	if err != nil || p.Org != "system" || !p.Admin || p.Subject != "bootstrap" || p.Key != k.ID {
		t.Fatalf("the key is %+v, %v; want system's admin %s", p, err, k.ID)
	}
	// Idempotent, also across a reopen (a restarted server).
	st.Close()
	st2, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	for i := 0; i < 2; i++ {
		k2, created, err := st2.EnsureKey(ctx, "system", "bootstrap", ScopeAdmin, secret)
		if err != nil || created || k2.ID != k.ID || !k2.CreatedAt.Equal(k.CreatedAt) {
			t.Fatalf("ensure again: %+v created %v, %v; want %+v unchanged", k2, created, err, k)
		}
	}
	if ks, _ := st2.Keys(ctx, "system"); len(ks) != 1 {
		t.Fatalf("system has %d keys, want 1", len(ks))
	}
	// Never moved to another org nor narrowed/widened.
	for _, c := range []struct{ org, scope string }{{"acme", ScopeAdmin}, {"system", ScopeTenant}} {
		if _, _, err := st2.EnsureKey(ctx, c.org, "bootstrap", c.scope, secret); !errors.Is(err, sandbox.ErrConflict) {
			t.Errorf("%s/%s: want a conflict, got %v", c.org, c.scope, err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
	// A revoked bootstrap key is made again.
	if err := st2.RevokeKey(ctx, "system", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, created, err := st2.EnsureKey(ctx, "system", "bootstrap", ScopeAdmin, secret); err != nil || !created {
		t.Fatalf("after revoke: created %v, %v", created, err)
	}
	if _, _, err := st2.EnsureKey(ctx, "system", "bootstrap", ScopeAdmin, "sbk_short"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a malformed key: %v", err)
	}
}
