package stats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/stats"
	"github.com/sandboxd/sandbox/internal/store"
)

func org(name string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: name, Subject: "test"})
}

// TestStats: on the service over the fake runtime, a running sandbox's
// stats are the backend's count and df's disks; a backend without a
// StatsReader answers the disks and says why the rest is absent; a
// backend that fails is a 502; a sleeping sandbox is a 409 and stays
// asleep; another org's sandbox is not found.
func TestStats(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := fake.New()
	svc := service.New(service.Config{StartTimeout: 5 * time.Second}, service.Deps{Store: st, Runtime: rt, Quotas: st})
	acme := org("acme")
	sb, err := svc.Lease(acme, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	rt.SetExec(func(ctx context.Context, name string, req runtime.ExecRequest) error {
		argv = req.Argv
		req.Stdout.Write([]byte("Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/x 1000 250 750 25% " + sb.Workdir + "\n"))
		return nil
	})

	got, err := stats.New(svc, rt, "fake").Stats(acme, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != sb.ID || got.CPUSeconds == nil || *got.MemoryBytes != 1<<20 || *got.Processes != 1 || got.Unavailable != "" ||
		len(got.Disk) != 1 || got.Disk[0].Path != sb.Workdir || got.Disk[0].UsedBytes != 250<<10 {
		t.Errorf("stats: %+v", got)
	}
	if strings.Join(argv, " ") != "df -kP "+sb.Workdir+" / /tmp" {
		t.Errorf("ran %q", argv)
	}

	got, err = stats.New(svc, nil, "fake").Stats(acme, sb.ID)
	if err != nil || got.CPUSeconds != nil || got.Unavailable != "the fake backend does not report CPU, memory and processes" || len(got.Disk) != 1 {
		t.Errorf("without a StatsReader: %+v %v", got, err)
	}

	rt.SetExec(fake.Exit(1, "df: no such file\n"))
	if got, err := stats.New(svc, nil, "fake").Stats(acme, sb.ID); err != nil || got.Disk == nil || len(got.Disk) != 0 {
		t.Errorf("df failing: %+v %v", got, err)
	}

	rt.Set(func(r *fake.Runtime) { r.StatsErr = errors.New("cgroup gone") })
	if _, err := stats.New(svc, rt, "fake").Stats(acme, sb.ID); sandbox.KindOf(err) != sandbox.KindBadGateway {
		t.Errorf("a backend that fails: %v", err)
	}

	if _, err := stats.New(svc, rt, "fake").Stats(org("globex"), sb.ID); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("another org's: %v", err)
	}

	if _, err := svc.Sleep(acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := stats.New(svc, rt, "fake").Stats(acme, sb.ID); sandbox.KindOf(err) != sandbox.KindConflict {
		t.Errorf("a sleeping sandbox: %v", err)
	}
	if row, err := svc.Get(acme, sb.ID); err != nil || row.Status != sandbox.StatusSleeping {
		t.Errorf("stats woke it: %+v %v", row, err)
	}
}
