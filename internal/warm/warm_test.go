package warm_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/warm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func spec(id, name string) runtime.Spec {
	return runtime.Spec{Name: name, Image: "exec", Labels: map[string]string{runtime.LabelSandbox: id, warm.Label: "1"},
		Volume: runtime.Volume{Name: "scratch-" + id, Scratch: true}}
}

// run runs p until the returned stop, which waits for Run to return.
func run(t *testing.T, p *warm.Pool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func waitReady(t *testing.T, p *warm.Pool, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.Ready() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d ready, want %d", p.Ready(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPool: a previous server's warm sandboxes go when the pool starts;
// it fills to its size, hands one out only for its class and image (its
// labels are the spec's), starts a successor, spares for the sweep only
// what it holds (a taken one until its lease settles), and deletes what it
// holds when it stops.
func TestPool(t *testing.T) {
	rt := fake.New()
	stray, err := rt.Create(t.Context(), spec("sb_stray", "sbx-stray"))
	if err != nil {
		t.Fatal(err)
	}
	leased, _ := rt.Create(t.Context(), runtime.Spec{Name: "sbx-leased", Labels: map[string]string{runtime.LabelSandbox: "sb_leased", runtime.LabelOrg: "acme"}})
	p := warm.New(warm.Config{Size: 2}, rt, "exec", "exec", spec, nil)
	if _, ok := p.Take("exec", "exec"); ok {
		t.Fatal("handed out before Run")
	}
	stop := run(t, p)
	waitReady(t, p, 2)
	objs := rt.Objects()
	if slices.Contains(objs, stray.Name) || !slices.Contains(objs, leased.Name) || len(objs) != 3 {
		t.Fatalf("after the start: %v (the stray %s goes, the leased one stays)", objs, stray.Name)
	}
	if _, ok := p.Take("exec", "python:3.12"); ok {
		t.Error("handed out for another image")
	}
	if _, ok := p.Take("dev", "exec"); ok {
		t.Error("handed out for another class")
	}
	w, ok := p.Take("exec", "exec")
	if !ok || w.Object.Labels[runtime.LabelSandbox] != w.ID || w.Object.Labels[warm.Label] == "" {
		t.Fatalf("take: %+v %v", w, ok)
	}
	// Held until its lease settles (its row written): a sweep that read
	// the rows before then must not take it for an orphan.
	if !p.Holds(w.Object.Name) {
		t.Error("lets go of what it handed out before its lease settled")
	}
	p.Settled(w.Object.Name)
	if p.Holds(w.Object.Name) {
		t.Error("still holds what it handed out after its lease settled")
	}
	waitReady(t, p, 2) // its successor
	if got := len(rt.Objects()); got != 4 {
		t.Errorf("objects after a take and its successor: %d, want 4", got)
	}
	stop()
	if got := rt.Objects(); !slices.Equal(got, sortedNames(leased.Name, w.Object.Name)) {
		t.Errorf("after the stop: %v, want only the leased and the taken one", got)
	}
	if p.Ready() != 0 || p.Holds(w.Object.Name) {
		t.Error("holds something after the stop")
	}
	if _, ok := p.Take("exec", "exec"); ok {
		t.Error("handed out after the stop")
	}
}

func sortedNames(n ...string) []string { slices.Sort(n); return n }

// TestPoolRetries: a start that fails is tried again after a wait (leases
// start their own meanwhile), and the pool fills once starts work.
func TestPoolRetries(t *testing.T) {
	rt := fake.New()
	rt.CreateErr = errors.New("no room")
	p := warm.New(warm.Config{Size: 1}, rt, "exec", "exec", spec, nil)
	p.Retry = 5 * time.Millisecond
	run(t, p)
	time.Sleep(30 * time.Millisecond)
	if p.Ready() != 0 {
		t.Fatal("ready while every start fails")
	}
	rt.Set(func(r *fake.Runtime) { r.CreateErr = nil })
	waitReady(t, p, 1)
}

// TestPoolOff: a size of none (the flag's 0) starts nothing and hands
// nothing out; a nil pool is none too.
func TestPoolOff(t *testing.T) {
	rt := fake.New()
	p := warm.New(warm.Config{Size: -1}, rt, "exec", "exec", spec, nil)
	run(t, p)()
	if n := len(rt.Objects()); n != 0 || p.Size() != 0 {
		t.Errorf("objects %d, size %d", n, p.Size())
	}
	var none *warm.Pool
	if _, ok := none.Take("exec", "exec"); ok || none.Holds("x") {
		t.Error("a nil pool handed out or held")
	}
	if warm.New(warm.Config{}, rt, "exec", "exec", spec, nil).Size() != warm.DefaultSize {
		t.Error("the zero config is not the default size")
	}
}

// TestPoolPrime: every sandbox is primed before it is handed out; the one
// taken is let go of as taken, the ones deleted at the stop as not.
func TestPoolPrime(t *testing.T) {
	rt := fake.New()
	p := warm.New(warm.Config{Size: 2}, rt, "exec", "exec", spec, nil)
	var mu sync.Mutex
	primed, taken, dropped := map[string]bool{}, map[string]bool{}, map[string]bool{}
	p.Prime = func(_ context.Context, w warm.Sandbox) func(bool) {
		mu.Lock()
		primed[w.Object.Name] = true
		mu.Unlock()
		return func(took bool) {
			mu.Lock()
			defer mu.Unlock()
			if took {
				taken[w.Object.Name] = true
			} else {
				dropped[w.Object.Name] = true
			}
		}
	}
	stop := run(t, p)
	waitReady(t, p, 2)
	w, _ := p.Take("exec", "exec")
	waitReady(t, p, 2)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(primed) != 3 || len(taken) != 1 || !taken[w.Object.Name] || len(dropped) != 2 || dropped[w.Object.Name] {
		t.Errorf("primed %v, taken %v, dropped %v", primed, taken, dropped)
	}
}
