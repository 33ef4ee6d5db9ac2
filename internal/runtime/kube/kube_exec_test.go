package kube_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// TestKubeExecCancelLeavesNothing: execs cancelled at any moment — while
// the stream is being set up, just after, or while the command runs —
// return at once, kill their command inside, and leave no client-go stream
// goroutine behind once the grace has passed.
func TestKubeExecCancelLeavesNothing(t *testing.T) {
	k := newKubeNet(t)
	obj := k.create(t, nil)
	before := goleak.IgnoreCurrent()

	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			in, w := io.Pipe() // stdin that never ends, as a terminal's
			defer w.Close()
			time.AfterFunc(time.Duration(rand.IntN(300))*time.Millisecond, cancel)
			start := time.Now()
			err := k.rt.Exec(ctx, obj.Name, runtime.ExecRequest{Argv: []string{"sleep", "300"}, Stdin: in, Stdout: io.Discard, Stderr: io.Discard, TTY: i%2 == 0})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a cancelled exec answered %v", err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("a cancelled exec took %s to return", d)
			}
		}()
	}
	wg.Wait()

	// Nothing runs inside any more.
	var out strings.Builder
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		out.Reset()
		err := k.rt.Exec(context.Background(), obj.Name, runtime.ExecRequest{Argv: []string{"ps", "-eo", "args"}, Stdout: &out})
		if err == nil && !strings.Contains(out.String(), "sleep 300") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancelled commands still run (%v):\n%s", err, out.String())
		}
	}
	// And nothing waits in the server.
	var err error
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if err = goleak.Find(before,
			goleak.IgnoreTopFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"),
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
			goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
		); err == nil {
			return
		}
	}
	t.Errorf("cancelled execs left goroutines: %v", err)
}
