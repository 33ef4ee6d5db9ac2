package main_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestShutdownOnSIGTERM: the real binary, told to stop as Kubernetes does.
// A call in flight finishes; an event stream ends at once (its client
// reconnects); a terminal is closed with 1012 and a reason; the process
// exits 0 well inside the grace; the sandbox runs on for the next server.
func TestShutdownOnSIGTERM(t *testing.T) {
	s := testenv.Serve(t, gvisor.DefaultRunsc(), []string{"acme"})
	c := client.New(s.URL, s.Keys["acme"])
	ctx := context.Background()
	sb, err := c.Lease(ctx, client.LeaseRequest{TTLSec: 300})
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan error, 1)
	go func() { followed <- c.Follow(ctx, "s1", 0, func(client.Event) error { return nil }) }()
	term, err := c.Terminal(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	termEnded := make(chan struct{})
	go func() { io.Copy(io.Discard, term); close(termEnded) }()
	type answer struct {
		r   *client.ExecResult
		err error
	}
	inFlight := make(chan answer, 1)
	go func() {
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "sleep 2; echo finished"})
		inFlight <- answer{r, err}
	}()
	time.Sleep(700 * time.Millisecond) // the exec has started

	took, err := s.Signal(syscall.SIGTERM)
	if err != nil {
		t.Errorf("the server's exit: %v", err)
	}
	if took > 15*time.Second {
		t.Errorf("SIGTERM took %v (the grace is 25 s; nothing but the 2 s exec was in flight)", took)
	}
	if a := <-inFlight; a.err != nil || a.r.Stdout != "finished\n" {
		t.Errorf("the call in flight: %+v %v", a.r, a.err)
	}
	select {
	case err := <-followed:
		if errors.Is(err, context.Canceled) {
			t.Errorf("the follower: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the event stream outlived the server")
	}
	select {
	case <-termEnded:
		if !strings.Contains(term.Reason(), "restarting") {
			t.Errorf("the terminal's close reason: %q", term.Reason())
		}
	case <-time.After(5 * time.Second):
		t.Error("the terminal outlived the server")
	}
	if _, err := http.Get(s.URL + "/healthz"); err == nil {
		t.Error("the server still answers after its exit")
	}
	if out, err := s.Runsc("list", "-quiet"); err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("the sandbox did not outlive the server: %q %v", out, err)
	}
}
