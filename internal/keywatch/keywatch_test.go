package keywatch_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Watch starts a goroutine per watched connection: none may outlive it.
func TestMain(m *testing.M) {
	// Ask every few milliseconds, so a revocation shows within a test's
	// patience and not Every's production 5 s.
	keywatch.Every = 5 * time.Millisecond
	goleak.VerifyTestMain(m)
}

// keyCtx opens a real store, mints a key of org acme expiring at exp (zero:
// never) and answers the store and the context of that key's principal, as
// the API's authentication makes it.
func keyCtx(t *testing.T, exp time.Time) (*store.Store, context.Context, string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	secret, k, err := st.MintKey(ctx, "acme", "test", store.ScopeTenant, exp)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Principal(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	return st, sandbox.WithPrincipal(ctx, p), k.ID
}

// ended waits for ctx to end, failing after a generous bound.
func ended(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watched context did not end")
	}
}

func TestRevokedKeyEndsConnection(t *testing.T) {
	st, ctx, id := keyCtx(t, time.Time{})
	wctx, stop := keywatch.Watch(ctx, st)
	defer stop()
	// Live until revoked: a few checks pass first.
	time.Sleep(30 * time.Millisecond)
	if wctx.Err() != nil {
		t.Fatalf("a working key's connection ended: %v", context.Cause(wctx))
	}
	if err := st.RevokeKey(context.Background(), "acme", id); err != nil {
		t.Fatal(err)
	}
	ended(t, wctx)
	if cause := context.Cause(wctx); !errors.Is(cause, keywatch.ErrRevoked) {
		t.Fatalf("cause %v, want ErrRevoked", cause)
	}
	if sandbox.KindOf(context.Cause(wctx)) != sandbox.KindUnauthorized {
		t.Fatalf("cause kind %v, want unauthorized", sandbox.KindOf(context.Cause(wctx)))
	}
}

func TestExpiredKeyEndsConnection(t *testing.T) {
	// A key that works now and expires while its connection is open.
	st, ctx, _ := keyCtx(t, time.Now().Add(150*time.Millisecond))
	wctx, stop := keywatch.Watch(ctx, st)
	defer stop()
	if wctx.Err() != nil {
		t.Fatal("ended before the key expired")
	}
	ended(t, wctx)
	if cause := context.Cause(wctx); !errors.Is(cause, keywatch.ErrRevoked) {
		t.Fatalf("cause %v, want ErrRevoked", cause)
	}
}

func TestLiveKeyIsLeftAlone(t *testing.T) {
	st, ctx, _ := keyCtx(t, time.Time{})
	c := &counting{Checker: st}
	wctx, stop := keywatch.Watch(ctx, c)
	// Long enough for many checks; none may end the connection.
	time.Sleep(100 * time.Millisecond)
	if wctx.Err() != nil {
		t.Fatalf("a working key's connection ended: %v", context.Cause(wctx))
	}
	if c.n.Load() < 2 {
		t.Fatalf("the key was asked %d times in 100 ms at Every=%v: it is not watched", c.n.Load(), keywatch.Every)
	}
	stop()
	// stop ends the watch (and its goroutine, which goleak checks) with no
	// revocation as cause.
	ended(t, wctx)
	if errors.Is(context.Cause(wctx), keywatch.ErrRevoked) {
		t.Fatal("stop reads as a revocation")
	}
}

func TestFailingCheckKeepsConnection(t *testing.T) {
	// A store that cannot answer (busy) is not a revocation.
	_, ctx, _ := keyCtx(t, time.Time{})
	c := &fixed{err: errors.New("database is locked")}
	wctx, stop := keywatch.Watch(ctx, c)
	defer stop()
	time.Sleep(50 * time.Millisecond)
	if c.n.Load() == 0 {
		t.Fatal("the key was never asked")
	}
	if wctx.Err() != nil {
		t.Fatalf("a failed check ended the connection: %v", context.Cause(wctx))
	}
}

func TestUnkeyedWorkIsNotWatched(t *testing.T) {
	// The server's own work, and a principal without a key, have nothing to
	// revoke: the checker is never asked.
	c := &fixed{active: false}
	for _, ctx := range []context.Context{
		context.Background(),
		sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: "acme", Subject: "test"}),
	} {
		wctx, stop := keywatch.Watch(ctx, c)
		time.Sleep(20 * time.Millisecond)
		if wctx.Err() != nil {
			t.Fatal("unkeyed work was ended")
		}
		stop()
	}
	if c.n.Load() != 0 {
		t.Fatalf("the checker was asked %d times for unkeyed work", c.n.Load())
	}
}

func TestParentEndsWatch(t *testing.T) {
	st, ctx, _ := keyCtx(t, time.Time{})
	parent, cancel := context.WithCancel(ctx)
	wctx, stop := keywatch.Watch(parent, st)
	defer stop()
	cancel()
	ended(t, wctx)
	if errors.Is(context.Cause(wctx), keywatch.ErrRevoked) {
		t.Fatal("the parent's end reads as a revocation")
	}
}

// counting counts the checks it passes on.
type counting struct {
	keywatch.Checker
	n atomic.Int32
}

func (c *counting) KeyActive(ctx context.Context, id string) (bool, error) {
	c.n.Add(1)
	return c.Checker.KeyActive(ctx, id)
}

// fixed answers every check the same (a fake for the no-key and store-
// failure paths, which a real store does not produce on demand).
type fixed struct {
	active bool
	err    error
	n      atomic.Int32
}

func (f *fixed) KeyActive(context.Context, string) (bool, error) {
	f.n.Add(1)
	return f.active, f.err
}
