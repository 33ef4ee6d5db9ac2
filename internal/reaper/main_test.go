package reaper_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The reaper's work runs on goroutines: none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
