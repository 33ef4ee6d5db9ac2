package service_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// TestTimeouts: a caller's timeoutSec becomes a run's deadline by one rule
// (exec and the interpreter share it): zero is the default, never past
// the maximum (a huge ask does not overflow), negative is refused.
func TestTimeouts(t *testing.T) {
	for _, c := range []struct {
		name string
		t    service.Timeouts
		sec  int
		want time.Duration
	}{
		{"zero value, zero ask", service.Timeouts{}, 0, service.DefaultExecTimeout},
		{"zero value, an ask", service.Timeouts{}, 90, 90 * time.Second},
		{"zero value, past the max", service.Timeouts{}, 1 << 40, service.DefaultMaxExecTimeout},
		{"configured default", service.Timeouts{Default: 5 * time.Second, Max: time.Minute}, 0, 5 * time.Second},
		{"default over max", service.Timeouts{Default: time.Hour, Max: time.Minute}, 0, time.Minute},
		{"cut to max", service.Timeouts{Max: time.Minute}, 61, time.Minute},
		{"huge ask", service.Timeouts{Max: time.Minute}, int(^uint(0) >> 1), time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.t.For(c.sec)
			if err != nil || got != c.want {
				t.Errorf("For(%d) = %v, %v; want %v", c.sec, got, err, c.want)
			}
		})
	}
	if _, err := (service.Timeouts{}).For(-1); sandbox.KindOf(err) != sandbox.KindInvalid {
		t.Errorf("negative: %v", err)
	}
	cfg := service.Config{ExecTimeout: 7 * time.Second}
	if got := cfg.Timeouts(); got.Default != 7*time.Second || got.Max != service.DefaultMaxExecTimeout {
		t.Errorf("Config.Timeouts: %+v", got)
	}
}
