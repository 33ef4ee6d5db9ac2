package ticket

import (
	"testing"
	"time"
)

func TestSpend(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(func() time.Time { return now })
	tok, _ := b.Mint("acme", "sb_1", Terminal)
	if _, ok := b.Spend(tok, "sb_1", Terminal); !ok {
		t.Fatal("a fresh ticket was refused")
	}
	if _, ok := b.Spend(tok, "sb_1", Terminal); ok {
		t.Fatal("a ticket opened twice")
	}
	// Refused for another sandbox or kind, and spent by the refusal.
	for _, c := range []struct{ sb, kind string }{{"sb_2", Terminal}, {"sb_1", Screen}} {
		tok, _ := b.Mint("acme", "sb_1", Terminal)
		if _, ok := b.Spend(tok, c.sb, c.kind); ok {
			t.Fatalf("ticket for sb_1/terminal opened %s/%s", c.sb, c.kind)
		}
		if _, ok := b.Spend(tok, "sb_1", Terminal); ok {
			t.Fatal("a refused ticket was still good")
		}
	}
	tok, _ = b.Mint("acme", "sb_1", Terminal)
	now = now.Add(TTL)
	if _, ok := b.Spend(tok, "sb_1", Terminal); ok {
		t.Fatal("an expired ticket opened")
	}
	if _, ok := b.Spend("", "sb_1", Terminal); ok {
		t.Fatal("no ticket opened")
	}
}

func TestPrune(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(func() time.Time { return now })
	for range 100 {
		b.Mint("acme", "sb_1", Terminal)
	}
	now = now.Add(TTL)
	b.Mint("acme", "sb_1", Terminal)
	if len(b.tickets) != 1 {
		t.Fatalf("%d tickets kept after expiry", len(b.tickets))
	}
}
