package egress

import (
	"testing"

	"go.uber.org/goleak"
)

// The proxies and resolvers serve on goroutines: none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
