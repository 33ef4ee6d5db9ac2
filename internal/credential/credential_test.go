package credential

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// world is the keeper's surroundings: an exchanger minting numbered
// tokens, the rows, and the sandbox's file as the writes leave it.
type world struct {
	mu       sync.Mutex
	rows     map[string]*sandbox.Sandbox
	subjects []string      // what each exchange was for
	ttl      time.Duration // of each minted token; 0: the lease's end
	fail     error         // the exchange's answer when set
	file     map[string]string
	writes   []runtime.ExecRequest
	gate     chan struct{} // when set, each write waits for it
	n        int
	relays   int
	// onRelay writes on the relay's stream (counted in relayWrites);
	// unset, the relay cannot and an exec writes.
	onRelay     bool
	relayWrites int
}

func (w *world) LeaseCredential(_ context.Context, subject, id string, end time.Time) (*identity.Token, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subjects = append(w.subjects, subject)
	if w.fail != nil {
		return nil, w.fail
	}
	w.n++
	exp := end
	if w.ttl > 0 {
		exp = time.Now().Add(w.ttl)
	}
	return &identity.Token{AccessToken: "tok" + string(rune('0'+w.n)), Expires: exp}, nil
}

func (w *world) Get(_ context.Context, id string) (*sandbox.Sandbox, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sb := w.rows[id]; sb != nil {
		c := *sb
		return &c, nil
	}
	return nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
}

func (w *world) exec(ctx context.Context, name string, req runtime.ExecRequest) error {
	if w.gate != nil {
		select {
		case <-w.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b, _ := io.ReadAll(req.Stdin)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, req)
	if w.file == nil {
		w.file = map[string]string{}
	}
	w.file[name] = string(b)
	return nil
}

func (w *world) Hold(context.Context, *sandbox.Sandbox) func() {
	w.mu.Lock()
	w.relays++
	w.mu.Unlock()
	return func() {}
}

func (w *world) Credential(_ context.Context, sb *sandbox.Sandbox, token string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.onRelay {
		return errors.New("this relay cannot write")
	}
	w.relayWrites++
	if w.file == nil {
		w.file = map[string]string{}
	}
	w.file[sb.Name] = token
	return nil
}

func (w *world) in(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.file[name]
}

type runner struct{}

func (runner) RunnerPath() string { return "/.sandbox/runner" }

func setup(t *testing.T, lease time.Duration) (*world, *Keeper, *sandbox.Sandbox) {
	t.Helper()
	sb := &sandbox.Sandbox{ID: sandbox.NewID(), Name: sandbox.NewName(), Org: "acme", Status: sandbox.StatusRunning, ExpiresAt: time.Now().Add(lease)}
	w := &world{rows: map[string]*sandbox.Sandbox{sb.ID: sb}}
	k := New(Deps{Exchanger: w, Rows: w, Exec: w.exec, Relays: w, OperatorOrg: "operator"})
	return w, k, sb
}

func caller(org, token string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org, Subject: "alice", Token: token})
}

func wait(t *testing.T, k *Keeper, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// A command waits for the write; writes go in order; the token is the
// write's stdin, never an argument; without a runner, the shell writes as
// the sandbox user, with one as root.
func TestHandWritesBeforeAnyCommand(t *testing.T) {
	w, k, sb := setup(t, time.Hour)
	w.gate = make(chan struct{})
	k.Hand(caller("acme", "caller-jwt"), sb, false)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if err := k.Wait(ctx, sb.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait returned %v while the write was held", err)
	}
	cancel()
	close(w.gate)
	wait(t, k, sb.ID)
	if got := w.in(sb.Name); got != "tok1" {
		t.Errorf("the sandbox holds %q, want tok1", got)
	}
	for _, r := range w.writes {
		for _, a := range r.Argv {
			if a == "tok1" || a == "caller-jwt" {
				t.Errorf("a token in argv: %q", r.Argv)
			}
		}
		if r.Root {
			t.Errorf("the shell writer ran as root: %+v", r)
		}
	}
	if w.subjects[0] != "caller-jwt" {
		t.Errorf("exchanged for %q", w.subjects[0])
	}

	// With a runner: the runner's own verb, as root.
	k.d.Runner = runner{}
	k.Hand(caller("acme", "caller-jwt"), sb, false)
	wait(t, k, sb.ID)
	last := w.writes[len(w.writes)-1]
	if !last.Root || last.Argv[0] != "/.sandbox/runner" || last.Argv[1] != "credential" || w.in(sb.Name) != "tok2" {
		t.Errorf("the runner's write: %+v, file %q", last, w.in(sb.Name))
	}
	k.Forget(sb.ID)
}

// No credential for the operator org, a call with no bearer, or a token
// outliving the lease: the sandbox keeps none (a fork's inherited one is
// removed), and a failed renew keeps the one in place.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  context.Context
		ttl  time.Duration
	}{
		{"operator org", caller("operator", "jwt"), 0},
		{"no bearer", caller("acme", ""), 0},
		{"outlives the lease", caller("acme", "jwt"), 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, k, sb := setup(t, time.Hour)
			w.ttl = tc.ttl
			w.file = map[string]string{sb.Name: "the parent's"}
			k.Hand(tc.ctx, sb, true)
			wait(t, k, sb.ID)
			if got, ok := w.file[sb.Name]; !ok || got != "" {
				t.Errorf("the sandbox holds %q, want it removed", got)
			}
			if release := k.HoldRelay(context.Background(), sb); w.relays != 0 {
				t.Errorf("a relay held for a sandbox with no credential")
			} else {
				release()
			}
		})
	}
	t.Run("a failed renew", func(t *testing.T) {
		w, k, sb := setup(t, time.Hour)
		k.Hand(caller("acme", "jwt"), sb, false)
		wait(t, k, sb.ID)
		w.fail = errors.New("the issuer is down")
		k.Hand(caller("acme", "jwt"), sb, false)
		wait(t, k, sb.ID)
		if got := w.in(sb.Name); got != "tok1" {
			t.Errorf("after a failed renew the sandbox holds %q, want tok1 kept", got)
		}
		k.Forget(sb.ID)
	})
}

// A lease ended while its exchange ran keeps nothing and refreshes
// nothing.
func TestEndedLeaseKeepsNothing(t *testing.T) {
	w, k, sb := setup(t, time.Hour)
	w.ttl = 300 * time.Millisecond
	delete(w.rows, sb.ID)
	k.Hand(caller("acme", "jwt"), sb, false)
	wait(t, k, sb.ID)
	if k.creds.get(sb.ID) != nil || w.in(sb.Name) != "" {
		t.Errorf("an ended lease kept %+v / %q", k.creds.get(sb.ID), w.in(sb.Name))
	}
	time.Sleep(400 * time.Millisecond)
	if len(w.subjects) != 1 {
		t.Errorf("exchanges after the end: %q", w.subjects)
	}
}

// TestEndDuringWriteKeepsNothing: a lease that ends (its row, then its
// Forget) while its credential is being written keeps neither the
// credential nor a refresh of it.
func TestEndDuringWriteKeepsNothing(t *testing.T) {
	w, k, sb := setup(t, time.Hour)
	w.ttl = time.Minute // ends before the lease: a refresh is scheduled
	w.gate = make(chan struct{})
	k.Hand(caller("acme", "jwt"), sb, false)
	for deadline := time.Now().Add(5 * time.Second); k.creds.get(sb.ID) == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no credential kept before its write")
		}
	}
	w.mu.Lock()
	delete(w.rows, sb.ID)
	w.mu.Unlock()
	k.Forget(sb.ID)
	close(w.gate)
	wait(t, k, sb.ID)
	k.creds.mu.Lock()
	defer k.creds.mu.Unlock()
	if k.creds.m[sb.ID] != nil || k.creds.refresh[sb.ID] != nil {
		t.Errorf("an ended lease kept %+v, refresh %v", k.creds.m[sb.ID], k.creds.refresh[sb.ID])
	}
}

// A credential that ends before its lease is exchanged again, for itself,
// before it ends; Forget stops that.
func TestRefresh(t *testing.T) {
	w, k, sb := setup(t, time.Hour)
	w.ttl = 600 * time.Millisecond
	k.Hand(caller("acme", "jwt"), sb, false)
	wait(t, k, sb.ID)
	deadline := time.Now().Add(5 * time.Second)
	for w.in(sb.Name) != "tok2" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	subjects := append([]string(nil), w.subjects...)
	w.mu.Unlock()
	if w.in(sb.Name) != "tok2" || len(subjects) < 2 || subjects[1] != "tok1" {
		t.Fatalf("after the refresh: %q, exchanged for %q", w.in(sb.Name), subjects)
	}
	k.Forget(sb.ID)
	wait(t, k, sb.ID)
	w.mu.Lock()
	n := len(w.subjects)
	w.mu.Unlock()
	time.Sleep(time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.subjects) != n {
		t.Errorf("exchanges after Forget: %q", w.subjects[n:])
	}
}

// Rewrite puts the last credential back after a wake; after Forget it
// writes nothing.
func TestRewrite(t *testing.T) {
	w, k, sb := setup(t, time.Hour)
	k.Hand(caller("acme", "jwt"), sb, false)
	wait(t, k, sb.ID)
	w.mu.Lock()
	w.file[sb.Name] = "" // a cold wake: the memory is gone
	w.mu.Unlock()
	k.Rewrite(context.Background(), sb)
	wait(t, k, sb.ID)
	if got := w.in(sb.Name); got != "tok1" {
		t.Errorf("after the rewrite: %q", got)
	}
	w.mu.Lock()
	before := w.relays
	w.mu.Unlock()
	if release := k.HoldRelay(context.Background(), sb); w.relays != before+1 {
		t.Errorf("no relay held for a sandbox with a credential")
	} else {
		release()
	}
	k.Forget(sb.ID)
	n := len(w.writes)
	k.Rewrite(context.Background(), sb)
	wait(t, k, sb.ID)
	if len(w.writes) != n {
		t.Errorf("a rewrite after Forget wrote")
	}
}

// TestWriteOnRelay: where the sandbox's relay can write the credential, no
// exec starts for it, and a removal goes the same way; where it cannot,
// the exec writes (the tests above).
func TestWriteOnRelay(t *testing.T) {
	w, k, sb := setup(t, time.Hour)
	w.onRelay = true
	k.Hand(caller("acme", "caller-jwt"), sb, false)
	wait(t, k, sb.ID)
	if got := w.in(sb.Name); got != "tok1" || w.relayWrites != 1 || len(w.writes) != 0 {
		t.Errorf("the sandbox holds %q after %d relay writes and %d execs", got, w.relayWrites, len(w.writes))
	}
	k.Hand(caller("operator", "op-jwt"), sb, true) // a fork of it, unprivileged: what it holds goes
	wait(t, k, sb.ID)
	if got := w.in(sb.Name); got != "" || w.relayWrites != 2 || len(w.writes) != 0 {
		t.Errorf("after a removal the sandbox holds %q (%d relay writes, %d execs)", got, w.relayWrites, len(w.writes))
	}
}
