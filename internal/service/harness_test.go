package service_test

import (
	"context"
	"github.com/sandboxd/sandbox/internal/files"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/meter"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/usage"
	"github.com/sandboxd/sandbox/internal/volumes"
)

// harness is a service over a real SQLite store in a temp dir and the fake
// runtime, with a clock the test moves.
type harness struct {
	t   *testing.T
	svc *service.Service
	// files are the sandboxes' files, on svc (internal/files).
	files *files.Files
	// vols are the org's project volumes (internal/volumes), whose
	// project locks svc's leases take.
	vols *volumes.Volumes
	// report is the org's quota report (internal/usage), on the count
	// of commands svc takes from.
	report *usage.Report
	st     *store.Store
	rt     *fake.Runtime
	m      *metrics.Metrics

	mu    sync.Mutex
	clock time.Time
}

type option func(*service.Config, *service.Deps)

func withFees(byClass map[string]int64) option {
	return func(_ *service.Config, d *service.Deps) {
		d.Meter = &meter.Meter{Fees: meter.Fees{ByClass: byClass}, Ledger: d.Store.(*store.Store)}
	}
}

// without gives the service a backend that lacks the capabilities named
// (the fake has them all).
func without(lacks ...runtime.Capability) option {
	return func(_ *service.Config, d *service.Deps) {
		c := runtime.Discover(d.Runtime).Without(lacks...)
		d.Capabilities = &c
	}
}

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, st: st, rt: fake.New(), m: metrics.New(), clock: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	h.rt.Now = h.now
	cfg := service.Config{StartTimeout: 5 * time.Second, ExecTimeout: 5 * time.Second}
	h.vols = volumes.New(st, h.rt, nil)
	cmds := &quota.Commands{}
	deps := service.Deps{Store: st, Runtime: h.rt, Metrics: h.m, Now: h.now, Quotas: st, ProjectLocks: h.vols, Commands: cmds}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	h.report = usage.New(cfg.Quota, st, st, cmds)
	h.svc = service.New(cfg, deps)
	h.files = files.New(h.svc, cfg.ExecTimeout, cfg.MaxExecTimeout)
	return h
}

func (h *harness) now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.clock = h.clock.Add(d)
	h.mu.Unlock()
}

func orgCtx(org string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org, Subject: "test"})
}

var acme = orgCtx("acme")

// rows lists an org's rows.
func (h *harness) rows(ctx context.Context) []*sandbox.Sandbox {
	h.t.Helper()
	l, err := h.st.List(ctx, store.Filter{Limit: 100000})
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

func (h *harness) row(ctx context.Context, id string) *sandbox.Sandbox {
	h.t.Helper()
	sb, err := h.st.Get(ctx, id)
	if err != nil {
		h.t.Fatalf("row %s: %v", id, err)
	}
	return sb
}

func (h *harness) lease(ctx context.Context, req service.LeaseRequest) *sandbox.Sandbox {
	h.t.Helper()
	sb, err := h.svc.Lease(ctx, req)
	if err != nil {
		h.t.Fatalf("lease %+v: %v", req, err)
	}
	return sb
}

var liveLine = regexp.MustCompile(`(?m)^sandbox_live\{class="(\w+)"\} (\S+)$`)

// live reads the live gauge of class as /metrics serves it.
func (h *harness) live(class string) float64 {
	h.t.Helper()
	rec := httptest.NewRecorder()
	h.m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, m := range liveLine.FindAllStringSubmatch(rec.Body.String(), -1) {
		if m[1] == class {
			v, _ := strconv.ParseFloat(m[2], 64)
			return v
		}
	}
	return 0
}

func (h *harness) balance(org string) int64 {
	h.t.Helper()
	b, err := h.st.Credit(context.Background(), org, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// wantKind fails unless err is of kind k.
func wantKind(t *testing.T, err error, k sandbox.Kind) {
	t.Helper()
	if err == nil || sandbox.KindOf(err) != k {
		t.Fatalf("error %v (kind %v), want kind %v", err, sandbox.KindOf(err), k)
	}
}

type fakeRT = fake.Runtime
