package processes_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/processes"
	"github.com/sandboxd/sandbox/internal/procwire"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
)

type runner struct{}

func (runner) RunnerPath() string { return runtime.RunnerPath }

func org(name string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: name, Subject: "test"})
}

// TestProcesses: on the service over the fake runtime, whose exec plays
// the in-sandbox daemon (cmd/sandbox-runner proc: a request line in, an
// answer line out), a start is recorded in the org's store and listed; a
// sleeping sandbox is answered from the records without waking it;
// another org's sandbox is not found; and without a runner every call is
// the one 501.
func TestProcesses(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	svc := service.New(service.Config{StartTimeout: 5 * time.Second, ExecTimeout: 5 * time.Second}, service.Deps{Store: st, Runtime: rt, Quotas: st, RuntimeName: "fake"})
	acme := org("acme")
	sb, err := svc.Lease(acme, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}

	none := processes.New(svc, st, rt, nil, nil, "fake", nil, nil)
	if _, err := none.StartProcess(acme, sb.ID, processes.ProcessRequest{Argv: []string{"true"}}); sandbox.KindOf(err) != sandbox.KindUnsupported ||
		!strings.HasPrefix(err.Error(), "this server's fake backend cannot ") {
		t.Errorf("no runner: %v", err)
	}

	var asked []procwire.Request
	rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if len(req.Argv) != 2 || req.Argv[0] != runtime.RunnerPath || req.Argv[1] != "proc" {
			return &runtime.ExitError{Code: 127}
		}
		line, _ := io.ReadAll(req.Stdin)
		var r procwire.Request
		if err := json.Unmarshal([]byte(strings.SplitN(string(line), "\n", 2)[0]), &r); err != nil {
			return err
		}
		asked = append(asked, r)
		rec := &procwire.Record{Pid: 7, Argv: []string{"sleep", "60"}, Dir: "/mnt/data", Started: time.Now().UnixMilli(), Output: 3}
		a := procwire.Answer{Boot: "b1", Process: rec, Processes: []*procwire.Record{rec}}
		return json.NewEncoder(req.Stdout).Encode(a)
	})
	p := processes.New(svc, st, rt, runner{}, nil, "fake", nil, nil)
	got, err := p.StartProcess(acme, sb.ID, processes.ProcessRequest{Argv: []string{"sleep", "60"}})
	if err != nil || got.Pid != 7 || got.Status != processes.ProcessRunning || got.OutputBytes != 3 {
		t.Fatalf("start: %+v %v", got, err)
	}
	if len(asked) != 1 || asked[0].Op != "start" || strings.Join(asked[0].Argv, " ") != "sleep 60" || asked[0].Dir != "/mnt/data" {
		t.Errorf("the daemon was asked %+v", asked)
	}
	if _, err := p.StartProcess(acme, sb.ID, processes.ProcessRequest{}); sandbox.KindOf(err) != sandbox.KindInvalid {
		t.Errorf("no argv: %v", err)
	}
	// A call longer than the daemon reads is refused here: sent, its rest
	// would wait for a reader that has stopped reading.
	starts := func() (n int) {
		for _, r := range asked {
			if r.Op == "start" {
				n++
			}
		}
		return n
	}
	before := starts()
	if _, err := p.StartProcess(acme, sb.ID, processes.ProcessRequest{Argv: []string{"echo", strings.Repeat("x", procwire.MaxRequest)}}); sandbox.KindOf(err) != sandbox.KindInvalid ||
		!strings.Contains(err.Error(), "the most is") || starts() != before {
		t.Errorf("a start longer than the daemon reads: %v (sent: %v)", err, starts() != before)
	}
	if _, err := p.StartProcess(org("globex"), sb.ID, processes.ProcessRequest{Argv: []string{"true"}}); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("another org: %v", err)
	}
	if !p.Running(acme, sb) {
		t.Errorf("a running process does not keep the sandbox awake")
	}
	if _, err := svc.Sleep(acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	n := len(asked)
	list, err := p.Processes(acme, sb.ID)
	if err != nil || len(list) != 1 || list[0].Pid != 7 || len(asked) != n {
		t.Errorf("a sleeping sandbox's list: %+v %v (daemon asked %d more)", list, err, len(asked)-n)
	}
}
