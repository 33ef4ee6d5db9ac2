package ticket

import (
	"testing"
	"time"
)

func TestSpend(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(func() time.Time { return now })
	tok, _, _ := b.Mint("acme", "sb_1", Terminal)
	if _, ok := b.Spend(tok, "sb_1", Terminal); !ok {
		t.Fatal("a fresh ticket was refused")
	}
	if _, ok := b.Spend(tok, "sb_1", Terminal); ok {
		t.Fatal("a ticket opened twice")
	}
	// Refused for another sandbox or kind, and spent by the refusal.
	for _, c := range []struct{ sb, kind string }{{"sb_2", Terminal}, {"sb_1", Screen}} {
		tok, _, _ := b.Mint("acme", "sb_1", Terminal)
		if _, ok := b.Spend(tok, c.sb, c.kind); ok {
			t.Fatalf("ticket for sb_1/terminal opened %s/%s", c.sb, c.kind)
		}
		if _, ok := b.Spend(tok, "sb_1", Terminal); ok {
			t.Fatal("a refused ticket was still good")
		}
	}
	tok, _, _ = b.Mint("acme", "sb_1", Terminal)
	now = now.Add(TTL)
	if _, ok := b.Spend(tok, "sb_1", Terminal); ok {
		t.Fatal("an expired ticket opened")
	}
	if _, ok := b.Spend("", "sb_1", Terminal); ok {
		t.Fatal("no ticket opened")
	}
}

func TestCapPerOrg(t *testing.T) {
	now := time.Unix(1000, 0)
	b := New(func() time.Time { return now })
	for range MaxPerOrg {
		if _, _, ok := b.Mint("acme", "sb_1", Terminal); !ok {
			t.Fatal("refused under the cap")
		}
	}
	if _, _, ok := b.Mint("acme", "sb_1", Terminal); ok {
		t.Fatal("minted past the cap")
	}
	if _, _, ok := b.Mint("globex", "sb_2", Terminal); !ok {
		t.Fatal("one org's cap refused another org")
	}
	now = now.Add(TTL) // all expire: the cap frees up
	if _, _, ok := b.Mint("acme", "sb_1", Terminal); !ok {
		t.Fatal("expired tickets still counted")
	}
	if len(b.tickets) != 1 || b.perOrg["acme"] != 1 {
		t.Fatalf("%d tickets, %v", len(b.tickets), b.perOrg)
	}
}
