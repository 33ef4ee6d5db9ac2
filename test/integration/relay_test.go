package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/server"
)

// TestAnswersAfterHalfAMinute: a call of the sandbox's process daemon whose
// answer comes more than 30 s after its request — a code context's run, a
// process's output followed — is answered whole through the relay. yamux
// drops a half-closed stream whose other end has not closed after its
// StreamCloseTimeout (30 s), and a dropped stream reads as a clean end: the
// server half-closed every request and read such answers as empty ("the
// sandbox's process daemon answered nonsense"), first seen as a kernel that
// took over 30 s to start on a busy machine.
func TestAnswersAfterHalfAMinute(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		p := e.startProcess("acme", id, map[string]any{"command": "echo first; sleep 35; echo second"})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		followed := e.events(ctx, "acme", id, p.Pid, "")

		start := time.Now()
		if ex := e.runIn(id, "python", "import time\ntime.sleep(35)\n6 * 7", 0); mainText(ex) != "42" {
			t.Errorf("a context's run of 35 s: %+v", ex)
		}
		t.Logf("the context's run answered after %v", time.Since(start).Round(time.Millisecond))

		var out strings.Builder
		ended := false
		for ev := range followed {
			switch ev.Event {
			case "stdout", "stderr":
				out.WriteString(stdoutOf(t, ev))
			case "end":
				ended = true
			}
		}
		if out.String() != "first\nsecond\n" || !ended {
			t.Errorf("a process's output followed for 35 s: %q (ended: %v)", out.String(), ended)
		}
	})
}
