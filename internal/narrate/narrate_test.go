package narrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func orgCtx(org string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org})
}

// TestBacklogThenLive: on the real store, a follower gets what was appended
// before it came (in order), then what comes after, and an org sees only
// its own session of a name.
func TestBacklogThenLive(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := New(st, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	go l.Run(ctx)
	defer func() { cancel(); l.Wait() }()

	for i := range 5 {
		l.Append("acme", "s", "stdout", []byte(fmt.Sprint(i)))
	}
	l.Append("globex", "s", "stdout", []byte("other org"))
	backlog, f, err := l.Follow(orgCtx("acme"), "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(backlog) != 5 || string(backlog[0].Data) != "0" || string(backlog[4].Data) != "4" {
		t.Fatalf("backlog: %+v", backlog)
	}
	l.Append("acme", "s", "stdout", []byte("live"))
	select {
	case ev := <-f.C():
		if string(ev.Data) != "live" || ev.Seq <= backlog[4].Seq {
			t.Fatalf("live event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no live event")
	}
	// Resuming from the third event gets the rest only.
	rest, f2, err := l.Follow(orgCtx("acme"), "s", backlog[2].Seq)
	if err != nil {
		t.Fatal(err)
	}
	f2.Close()
	if len(rest) != 3 || string(rest[2].Data) != "live" {
		t.Fatalf("resumed backlog: %+v", rest)
	}
}

// stuckStore never finishes a write, and fails reads.
type stuckStore struct{ release chan struct{} }

func (s stuckStore) AppendEvents(ctx context.Context, _ []store.Event) error {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return errors.New("store down")
}

func (s stuckStore) Events(context.Context, string, int64, int) ([]store.Event, error) {
	return nil, errors.New("store down")
}

// TestNeverBlocks: with a store that hangs and a follower that never reads,
// Append still returns at once; the follower is cut off, the overflow is
// counted as dropped.
func TestNeverBlocks(t *testing.T) {
	st := stuckStore{release: make(chan struct{})}
	l := New(st, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	go l.Run(ctx)
	f := &Follower{l: l, t: topic{"acme", "s"}, ch: make(chan Event, followerLen)}
	l.followers[f.t] = map[*Follower]struct{}{f: {}}

	start := time.Now()
	n := orgQueueBytes/int(cost(Event{Kind: "stdout", Session: "s", Data: []byte("x")})) + followerLen + 1000
	for range n {
		l.Append("acme", "s", "stdout", []byte("x"))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d appends took %s with a stuck store", n, d)
	}
	select {
	case <-drain(f.C()):
	case <-time.After(5 * time.Second):
		t.Errorf("a follower that never read was not cut off")
	}
	if l.Dropped() == 0 {
		t.Errorf("nothing counted as dropped")
	}
	close(st.release)
	cancel()
	l.Wait()
}

// drain reads ch and closes the answer once ch is closed.
func drain(ch <-chan Event) chan struct{} {
	out := make(chan struct{})
	go func() {
		for range ch {
		}
		close(out)
	}()
	return out
}

// TestOrgsQueueApart: on the real store, an org that floods its sessions
// while the writer is behind fills its own queue only: another org's
// events, appended after the flood, are all stored.
func TestOrgsQueueApart(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := New(st, quiet) // not running yet: the writer is behind
	big := make([]byte, MaxEvent)
	for l.Dropped() < 100 {
		l.Append("hostile", "flood", "stdout", big)
	}
	for i := range 10 {
		l.Append("quiet", "s", "stdout", []byte(fmt.Sprint(i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go l.Run(ctx)
	defer func() { cancel(); l.Wait() }()
	backlog, f, err := l.Follow(orgCtx("quiet"), "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if len(backlog) != 10 {
		t.Errorf("the quiet org's log has %d of its 10 events after the other's flood", len(backlog))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queued != 0 {
		t.Errorf("%d bytes still counted as queued after the writer drained", l.queued)
	}
}
