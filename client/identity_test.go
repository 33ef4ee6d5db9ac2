package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
)

// TestSandboxCredential: the sandbox's own credential, read where the
// server wrote it, as a client's key: its own lease, a renew and a note
// into a session (which a follower with the org's key sees); no list.
func TestSandboxCredential(t *testing.T) {
	c, s := newClient(t)
	ctx := context.Background()
	sb, err := c.Lease(ctx, client.LeaseRequest{TTLSec: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer c.End(ctx, sb.ID, false)
	r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"cat", client.CredentialPath}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("reading the credential: %+v %v", r, err)
	}
	own := client.New(s.URL, strings.TrimSpace(r.Stdout))
	own.HTTP = c.HTTP // held to the served document too
	if got, err := own.Get(ctx, sb.ID); err != nil || got.ID != sb.ID {
		t.Fatalf("its own lease: %+v %v", got, err)
	}
	if _, err := own.Renew(ctx, sb.ID, 600); err != nil {
		t.Errorf("renewing itself: %v", err)
	}
	var ce *client.Error
	if _, err := own.List(ctx, client.ListOptions{}); !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
		t.Errorf("a list with the credential: %v", err)
	}
	if err := own.Narrate(ctx, "agent-1", "cloned the repo"); err != nil {
		t.Fatalf("narrating: %v", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	found := errors.New("found")
	err = c.Follow(fctx, "agent-1", 0, func(e client.Event) error {
		if e.Kind == "note" && e.Text == "cloned the repo" {
			return found
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Errorf("the note in the session's log: %v", err)
	}
}
