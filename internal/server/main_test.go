package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives until DB.Close; the
		// httptest client keeps idle connections briefly.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
