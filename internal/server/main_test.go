package server_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if runnerPath != "" {
			os.RemoveAll(filepath.Dir(runnerPath))
		}
		os.Exit(code)
	}))
}
