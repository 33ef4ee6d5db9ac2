package identity

import (
	"context"
	"testing"
	"time"
)

// TestLimiter: a sandbox's bucket empties after its burst and refills at
// its rate, without touching another's; full buckets are forgotten; a
// request waits for a global slot, and is refused once the wait is over.
func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(1)
	l.now = func() time.Time { return now }
	for i := range sandboxBurst {
		if !l.allow("acme", "a") {
			t.Fatalf("exchange %d of the burst refused", i)
		}
	}
	if l.allow("acme", "a") {
		t.Fatal("past the burst: allowed")
	}
	if !l.allow("acme", "b") || !l.allow("globex", "a") {
		t.Fatal("another sandbox's bucket is the flooder's")
	}
	now = now.Add(time.Second)
	for range int(sandboxRate) {
		if !l.allow("acme", "a") {
			t.Fatal("the bucket did not refill at its rate")
		}
	}
	if l.allow("acme", "a") {
		t.Fatal("refilled past its rate")
	}
	now = now.Add(time.Hour)
	l.prune(now)
	if len(l.buckets) != 0 {
		t.Errorf("full buckets kept: %d", len(l.buckets))
	}

	if !l.acquire(context.Background()) {
		t.Fatal("a free slot refused")
	}
	released := make(chan bool)
	go func() { time.Sleep(50 * time.Millisecond); l.release(); released <- true }()
	if !l.acquire(context.Background()) {
		t.Fatal("a slot freed within the wait was not taken")
	}
	<-released
	start := time.Now()
	if l.acquire(context.Background()) {
		t.Fatal("a slot that never frees was taken")
	}
	if w := time.Since(start); w < exchangeWait {
		t.Errorf("refused after %v, before the wait", w)
	}
	l.release()
}
