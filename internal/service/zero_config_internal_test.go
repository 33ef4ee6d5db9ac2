package service

import (
	"testing"

	"github.com/sandboxd/sandbox/internal/flagx/flagxtest"
)

// TestZeroConfigIsTheFlagDefaults: a zero Config behaves as the flags'
// defaults do (server.New(Config{}) is sandbox serve with no flags).
func TestZeroConfigIsTheFlagDefaults(t *testing.T) {
	flagxtest.ZeroIsDefault(t, (*Config).RegisterFlags, Config.withDefaults)
}
