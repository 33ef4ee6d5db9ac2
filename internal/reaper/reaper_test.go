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
		return &sandbox.Sandbox{Status: st, CreatedAt: created, ExpiresAt: expires, LastUsedAt: expires}
	}
	idle := func(sb *sandbox.Sandbox, lastUsed time.Time) *sandbox.Sandbox {
		sb.LastUsedAt = lastUsed
		return sb
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
		{"pending for an hour: stuck", row(sandbox.StatusPending, t0, t0.Add(time.Minute)), t0.Add(time.Hour), Stuck},
		{"running, idle for an hour", idle(row(sandbox.StatusRunning, t0, t0.Add(3*time.Hour)), t0), t0.Add(time.Hour), Idle},
		{"running, used recently", idle(row(sandbox.StatusRunning, t0, t0.Add(3*time.Hour)), t0.Add(50*time.Minute)), t0.Add(time.Hour), NotDue},
		{"sleeping is never idle", idle(row(sandbox.StatusSleeping, t0, t0.Add(3*time.Hour)), t0), t0.Add(2 * time.Hour), NotDue},
		{"sleeping, lease over", row(sandbox.StatusSleeping, t0, t0.Add(time.Hour)), t0.Add(2 * time.Hour), Expired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Policy{Ceiling: day, IdleAfter: time.Hour}).Due(tc.sb, tc.now); got != tc.want {
				t.Errorf("Due = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNeverSleeps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sb := &sandbox.Sandbox{Status: sandbox.StatusRunning, CreatedAt: t0, LastUsedAt: t0, ExpiresAt: t0.Add(5 * time.Hour)}
	if got := (Policy{Ceiling: 24 * time.Hour}).Due(sb, t0.Add(3*time.Hour)); got != NotDue {
		t.Errorf("IdleAfter 0 slept a sandbox: %q", got)
	}
}
