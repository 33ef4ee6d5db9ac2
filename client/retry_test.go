package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandbox/client"
)

// TestRetry (pure logic, a stand-in server): a 429 with Retry-After is
// waited out and tried again for any call; a 503 only for a GET; the
// bound holds; the message comes through unchanged.
func TestRetry(t *testing.T) {
	var calls atomic.Int32
	status := http.StatusTooManyRequests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(status)
			w.Write([]byte(`{"error":"quota live exceeded: limit 16"}`))
			return
		}
		w.WriteHeader(201)
		w.Write([]byte(`{"id":"sb_x","kind":"sandbox"}`))
	}))
	defer srv.Close()
	c := client.New(srv.URL, "k")
	c.MaxWait = 10e6 // 10 ms: the test does not wait out the second
	ctx := context.Background()

	if sb, err := c.Lease(ctx, client.LeaseRequest{}); err != nil || sb.ID != "sb_x" || calls.Load() != 3 {
		t.Errorf("a 429 lease: %+v %v after %d calls", sb, err, calls.Load())
	}
	calls.Store(0)
	status = http.StatusServiceUnavailable
	if _, err := c.Lease(ctx, client.LeaseRequest{}); client.StatusOf(err) != 503 || calls.Load() != 1 {
		t.Errorf("a 503 lease was retried: %v after %d calls", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.Get(ctx, "sb_x"); err != nil || calls.Load() != 3 {
		t.Errorf("a 503 get: %v after %d calls", err, calls.Load())
	}
	calls.Store(-10)
	status = http.StatusTooManyRequests
	_, err := c.Get(ctx, "sb_x")
	if e, ok := err.(*client.Error); !ok || e.Message != "quota live exceeded: limit 16" || calls.Load() != -10+4 {
		t.Errorf("past the bound: %v after %d calls", err, calls.Load()+10)
	}
}
