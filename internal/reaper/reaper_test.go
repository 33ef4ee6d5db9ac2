package reaper

import (
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	row := func(st sandbox.Status, created, expires time.Time) *sandbox.Sandbox {
		return &sandbox.Sandbox{Status: st, CreatedAt: created, ExpiresAt: expires}
	}
	for _, tc := range []struct {
		name string
		sb   *sandbox.Sandbox
		now  time.Time
		want Reason
	}{
		{"running, lease ahead", row(sandbox.StatusRunning, t0, t0.Add(time.Hour)), t0.Add(time.Minute), NotDue},
		{"running, lease just over", row(sandbox.StatusRunning, t0, t0.Add(time.Hour)), t0.Add(time.Hour), Expired},
		{"running, long expired", row(sandbox.StatusRunning, t0, t0.Add(time.Hour)), t0.Add(3 * time.Hour), Expired},
		{"expiry past the ceiling", row(sandbox.StatusRunning, t0, t0.Add(2*day)), t0.Add(day), Ceiling},
		{"error row", row(sandbox.StatusError, t0, t0.Add(time.Hour)), t0, Errored},
		{"pending, starting", row(sandbox.StatusPending, t0, t0.Add(-time.Second)), t0.Add(time.Minute), NotDue},
		{"pending for an hour: stuck", row(sandbox.StatusPending, t0, t0.Add(time.Minute)), t0.Add(time.Hour), Expired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Due(tc.sb, tc.now, day); got != tc.want {
				t.Errorf("Due = %q, want %q", got, tc.want)
			}
		})
	}
}
