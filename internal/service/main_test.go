package service_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The service's work runs on goroutines: none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
