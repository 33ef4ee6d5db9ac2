package integration_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go's own background work in the kube suite: its pooled
		// HTTP/2 connection to the apiserver, and the exec stream's heartbeat,
		// which ends one ping period after its stream.
		goleak.IgnoreTopFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.Cleanup(func(code int) {
			if runnerPath != "" {
				os.RemoveAll(filepath.Dir(runnerPath))
			}
			os.Exit(code)
		}))
}
