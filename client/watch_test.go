package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestWatchDir: a watch whose connection drops after its first event is
// resumed after it (Last-Event-ID), and the changes made while it was away
// come, ready once; on both backends.
func TestWatchDir(t *testing.T) {
	backends(t, func(t *testing.T, c *client.Client, s *testenv.Server, backend string) {
		cut := &cutting{next: c.HTTP.Transport, suffix: "/fs/watch"}
		c.HTTP = &http.Client{Transport: cut}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := c.Lease(ctx, client.LeaseRequest{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.End(context.Background(), sb.ID, false)
		if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "mkdir out"}); err != nil || r.ExitCode != 0 {
			t.Fatalf("mkdir: %+v %v", r, err)
		}
		var got []string
		enough := errors.New("enough")
		err = c.WatchDir(ctx, sb.ID, "out", false, func(ev client.FileEvent) error {
			if ev.Type == "ready" {
				got = append(got, "ready")
				// Made while the stream drops: the stream after it has it.
				if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo x > out/a.txt"}); err != nil || r.ExitCode != 0 {
					return errors.Join(err, errors.New("the write failed"))
				}
				return nil
			}
			got = append(got, ev.Type+" "+ev.Name)
			if ev.Type == "written" {
				return enough
			}
			return nil
		})
		if !errors.Is(err, enough) || !slices.Equal(got, []string{"ready", "created a.txt", "written a.txt"}) {
			t.Errorf("watch: %v, events %q", err, got)
		}
		if r := cut.resumes(); len(r) != 2 || r[0] != "" || r[1] == "" {
			t.Errorf("the watch's requests resumed after %q, want nothing, then the ready event's id", r)
		}
		if _, err := c.End(ctx, sb.ID, false); err != nil {
			t.Error(err)
		}
	})
}
