// Package credential keeps each lease's own credential: it obtains it by
// token exchange for the caller's token, checks that it is the sandbox's
// own (it verifies here, names the org and the sandbox, ends with the
// lease), writes it into the sandbox over the exec channel in order,
// exchanges a short-lived one again before it ends, writes it in again
// after a wake, and holds the sandbox's relay (its API socket) while
// the caller's code runs with it. The service sees it only through its
// Credentials seam; nothing here is ever part of a container's spec,
// environment or labels.
package credential

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Exchanger obtains a sandbox's credential by token exchange for the
// caller's own token (identity.Issuer in process, or an external token
// endpoint): it names the org and the sandbox and expires no later than
// end.
type Exchanger interface {
	LeaseCredential(ctx context.Context, subjectToken, id string, end time.Time) (*identity.Token, error)
}

// Verifier checks a token the way every door of this server will.
type Verifier interface {
	Principal(ctx context.Context, token string) (sandbox.Principal, error)
}

// Exec runs a program in the sandbox named name, bypassing every queue:
// the runtime's own Exec.
type Exec func(ctx context.Context, name string, req runtime.ExecRequest) error

// Relays hold a sandbox's relay, which carries its API socket, and write
// the credential on it.
type Relays interface {
	Hold(ctx context.Context, sb *sandbox.Sandbox) (release func())
	// Credential writes token on sb's relay (empty: removes it), as the
	// sandbox user into the user's own directory; an error means the
	// relay cannot, and an exec writes it instead.
	Credential(ctx context.Context, sb *sandbox.Sandbox, token string) error
}

// Path is where a sandbox finds its credential: a file of the sandbox
// user's alone (0600 in a 0700 directory), in memory (the gVisor root
// overlay is the sandbox's memory; on Kubernetes a memory emptyDir),
// written over the exec channel and never through a spec, an environment
// or a label.
const Path = "/run/sandbox/token"

// script writes stdin to Path whole (a rename), or removes it when stdin
// is empty: where there is no runner (a pod), as the sandbox user, in a
// directory that is already the user's. It is never run as root: a
// shell's names can be swapped under it by the user.
const script = `set -e
umask 077
d=/run/sandbox
t=$(mktemp "$d/.token.XXXXXX")
cat > "$t"
if [ ! -s "$t" ]; then rm -f "$t" "$d/token"; exit 0; fi
mv -f "$t" "$d/token"`

// Deps are what a Keeper is made of. Exchanger, Rows and Exec are
// required.
type Deps struct {
	Exchanger Exchanger
	// Verify checks an exchanged credential (it must be the sandbox's
	// own); nil takes the exchanger's word.
	Verify Verifier
	// Rows are the orgs' sandbox rows: a lease ended while its exchange
	// ran keeps nothing.
	Rows identity.Rows
	Exec Exec
	// Runner, when sandboxes have one, writes the credential as the
	// sandbox's root; nil writes it with the sandbox user's shell.
	Runner runtime.Runner
	// Relays carry the sandboxes' API sockets; nil: sandboxes have none.
	Relays Relays
	// OperatorOrg is the reserved org, whose leases start unprivileged:
	// no credential is ever obtained for it.
	OperatorOrg string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log is where the keeper logs; nil discards.
	Log *slog.Logger
}

// Keeper keeps the lease credentials. Its methods are the service's
// Credentials seam.
type Keeper struct {
	d     Deps
	creds creds
}

// New returns a Keeper of d.
func New(d Deps) *Keeper {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{d: d}
}

func (k *Keeper) now() time.Time { return k.d.Now().UTC() }

// creds are the credentials handed, by sandbox id, kept in memory only
// (a cold wake, a container started again without its memory, is handed
// its credential again), and the writes in flight: a lease is answered
// while its credential is written, and every command into the sandbox
// waits for the write first, so no program of the caller's ever runs
// before its credential is in place. Writes into one sandbox go in order.
type creds struct {
	mu      sync.Mutex
	m       map[string]*identity.Token
	writing map[string]chan struct{} // closed when the sandbox's latest write ends
	refresh map[string]*time.Timer   // a credential that ends before its lease is exchanged again
}

// schedule replaces id's refresh timer.
func (c *creds) schedule(id string, t *time.Timer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refresh == nil {
		c.refresh = map[string]*time.Timer{}
	}
	if old := c.refresh[id]; old != nil {
		old.Stop()
	}
	if t == nil {
		delete(c.refresh, id)
		return
	}
	c.refresh[id] = t
}

// begin queues a write into id: it may run once prev is closed, and
// closes done (through end) when it has.
func (c *creds) begin(id string) (prev <-chan struct{}, done chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writing == nil {
		c.writing = map[string]chan struct{}{}
	}
	prev, done = c.writing[id], make(chan struct{})
	c.writing[id] = done
	return prev, done
}

func (c *creds) end(id string, done chan struct{}) {
	close(done)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writing[id] == done {
		delete(c.writing, id)
	}
}

// wait returns once no write into id is in flight.
func (c *creds) wait(ctx context.Context, id string) error {
	c.mu.Lock()
	ch := c.writing[id]
	c.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *creds) get(id string) *identity.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

func (c *creds) set(id string, t *identity.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*identity.Token{}
	}
	if t == nil {
		delete(c.m, id)
		if r := c.refresh[id]; r != nil {
			r.Stop()
			delete(c.refresh, id)
		}
		return
	}
	c.m[id] = t
}

var errOperatorLease = errors.New("the reserved operator org's leases start unprivileged: no credential is minted for it")

// Hand obtains sb's credential for the caller's token (the principal in
// ctx) and writes it in, in the background (see creds). A failure never
// fails the lease: the sandbox runs with no credential, and the log says
// why. inherited says the container came from another's memory (a fork),
// whose credential it must not keep.
func (k *Keeper) Hand(ctx context.Context, sb *sandbox.Sandbox, inherited bool) {
	k.queue(ctx, sb, func(ctx context.Context, sb *sandbox.Sandbox) { k.credential(ctx, sb, inherited, true) })
}

// Wait returns once no write into sandbox id is in flight: every command
// into the sandbox waits for it first, so no program of the caller's ever
// runs before its credential is in place.
func (k *Keeper) Wait(ctx context.Context, id string) error { return k.creds.wait(ctx, id) }

// Forget drops sandbox id's credential and its refresh: the lease ended.
func (k *Keeper) Forget(id string) { k.creds.set(id, nil) }

// HoldRelay holds sb's relay, which carries its API socket, until release
// is called — only for a sandbox that has a credential to call with.
func (k *Keeper) HoldRelay(ctx context.Context, sb *sandbox.Sandbox) (release func()) {
	if k.d.Relays == nil || k.creds.get(sb.ID) == nil {
		return func() {}
	}
	return k.d.Relays.Hold(ctx, sb)
}

// queue runs work on a copy of sb in the background, after the sandbox's
// credential writes queued before it and before any command into the
// sandbox (see creds), under a deadline of its own.
func (k *Keeper) queue(ctx context.Context, sb *sandbox.Sandbox, work func(context.Context, *sandbox.Sandbox)) {
	copied := *sb // the caller goes on with its own (a wake's answer, say)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	prev, done := k.creds.begin(copied.ID)
	go func() {
		defer cancel()
		defer k.creds.end(copied.ID, done)
		if prev != nil {
			<-prev
		}
		work(ctx, &copied)
	}()
}

// credential is Hand's work; without write the credential is only kept
// (a sleeping sandbox's, written by its wake).
func (k *Keeper) credential(ctx context.Context, sb *sandbox.Sandbox, inherited, write bool) {
	p, _ := sandbox.PrincipalFrom(ctx)
	var tok *identity.Token
	var err error
	switch {
	case p.Org == k.d.OperatorOrg:
		err = errOperatorLease
	case p.Token == "":
		err = errors.New("the call carried no bearer to exchange")
	default:
		subject := p.Token
		// A sandbox renewing itself may hold a narrowed credential: its
		// successor is exchanged for the sandbox's own, so a renew never
		// narrows what the sandbox holds.
		if c := k.creds.get(sb.ID); p.Confined() && c != nil && c.Expires.After(k.now()) {
			subject = c.AccessToken
		}
		tok, err = k.d.Exchanger.LeaseCredential(ctx, subject, sb.ID, sb.ExpiresAt)
	}
	if err == nil {
		err = k.check(ctx, tok, sb, p.Org)
	}
	if err != nil {
		reason := err.Error()
		if len(reason) > 200 { // an external issuer's words, bounded
			reason = reason[:200] + "…"
		}
		k.d.Log.Info("the sandbox has no credential", "sandbox", sb.ID, "reason", reason)
		if !inherited && k.creds.get(sb.ID) != nil {
			return // a refresh or renew that failed: the one in place stays until it expires
		}
		k.creds.set(sb.ID, nil)
		// Whatever the container holds goes: a fork's copy of its
		// parent's, an image's stray one.
		if werr := k.write(ctx, sb, ""); werr != nil {
			k.d.Log.Warn("removing a credential the sandbox must not keep", "sandbox", sb.ID, "err", werr)
		}
		return
	}
	leases := identity.RowLeases{Rows: k.d.Rows, Now: k.now}
	if _, err := leases.LeaseEnd(ctx, p.Org, sb.ID); err != nil {
		return // ended while the exchange ran: nothing to keep, nothing to refresh
	}
	k.creds.set(sb.ID, tok)
	if write {
		// The sandbox's relay, which carries its API socket, starts beside
		// the write, and the first command (which waits for both) finds
		// the socket there without starting it.
		warm := k.warmRelay(ctx, sb)
		if err := k.write(ctx, sb, tok.AccessToken); err != nil {
			k.d.Log.Warn("writing the sandbox's credential", "sandbox", sb.ID, "err", err)
		}
		warm()
	}
	// One that ends before its lease (an issuer's --lease-credential-ttl,
	// an external issuer's own lifetime) is exchanged again, for itself,
	// when two thirds of what is left of its life have gone.
	if left := tok.Expires.Sub(k.now()); tok.Expires.Before(sb.ExpiresAt) && left > 0 {
		org, id, token := p.Org, sb.ID, tok.AccessToken
		k.creds.schedule(id, time.AfterFunc(left*2/3, func() { k.refresh(org, id, token) }))
	}
	// A lease that ended meanwhile keeps nothing: its Forget may have run
	// between the check above and the set (or the schedule). Its row says
	// so by now; a later end's Forget comes after its row does.
	if _, err := leases.LeaseEnd(ctx, p.Org, sb.ID); err != nil {
		k.creds.set(sb.ID, nil)
	}
}

// warmRelay starts sb's relay in the background; the returned wait
// returns once its API socket is there (or could not be).
func (k *Keeper) warmRelay(ctx context.Context, sb *sandbox.Sandbox) (wait func()) {
	if k.d.Relays == nil {
		return func() {}
	}
	held := make(chan func(), 1)
	go func() { held <- k.d.Relays.Hold(ctx, sb) }()
	return func() { (<-held)() }
}

// check refuses an exchanged token that is not sb's own: it must verify
// here (a trusted issuer's), be confined to sb of org, and end with the
// lease at the latest. An external endpoint's ordinary access token for
// the caller would be the org's whole power inside the sandbox.
func (k *Keeper) check(ctx context.Context, tok *identity.Token, sb *sandbox.Sandbox, org string) error {
	if tok.Expires.After(sb.ExpiresAt) {
		return errors.New("the exchanged credential would outlive the lease")
	}
	if k.d.Verify == nil {
		return nil
	}
	got, err := k.d.Verify.Principal(ctx, tok.AccessToken)
	if err != nil {
		return errors.New("the exchanged token does not verify here (trust its issuer with --oidc-issuer): " + sandbox.Message(err))
	}
	if !got.Confined() || got.Sandbox != sb.ID || got.Org != org || got.Expires.After(sb.ExpiresAt) {
		return errors.New("the exchanged token is not this sandbox's own credential (it must name the org and sandbox_id, and end with the lease)")
	}
	return nil
}

// refresh exchanges a sandbox's credential for its successor, while the
// lease lives.
func (k *Keeper) refresh(org, id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "credential refresh", Token: token})
	sb, err := k.d.Rows.Get(ctx, id)
	switch {
	case err != nil:
		return // ended
	case sb.Status == sandbox.StatusRunning:
		k.Hand(ctx, sb, false)
	case sb.Status == sandbox.StatusSleeping:
		// Kept for the wake to write: the exchange needs a live subject.
		k.credential(ctx, sb, false, false)
	}
}

// Rewrite writes sb's last credential in again after a wake, if it still
// lives: a container started without its memory lost it, and one restored
// from its memory may hold one refreshed since.
func (k *Keeper) Rewrite(ctx context.Context, sb *sandbox.Sandbox) {
	if tok := k.creds.get(sb.ID); tok == nil || !tok.Expires.After(k.now()) {
		return
	}
	k.queue(ctx, sb, func(ctx context.Context, sb *sandbox.Sandbox) {
		// The latest, read after the writes before it.
		if tok := k.creds.get(sb.ID); tok != nil && tok.Expires.After(k.now()) {
			if err := k.write(ctx, sb, tok.AccessToken); err != nil {
				k.d.Log.Warn("writing the sandbox's credential after a wake", "sandbox", sb.ID, "err", err)
			}
		}
	})
}

// write writes token (or, empty, removes the file) over the exec channel:
// on a stream of the sandbox's relay where it can, else as an exec's
// stdin, never an argument.
func (k *Keeper) write(ctx context.Context, sb *sandbox.Sandbox, token string) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if r := k.d.Relays; r != nil {
		// On the relay's stream, no process starts: the relay is there
		// for the API socket anyway (started beside the first write).
		err := r.Credential(wctx, sb, token)
		if err == nil {
			return nil
		}
		k.d.Log.Debug("the relay did not write the credential; an exec does", "sandbox", sb.ID, "err", err)
	}
	errBuf := capture.New(4 << 10) // a failed write's stderr
	req := runtime.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Dir: "/", Stdin: strings.NewReader(token), Stderr: errBuf}
	if r := k.d.Runner; r != nil {
		// One static process, no shell in the image needed, and the one
		// writer trusted to run as the sandbox's root.
		req.Argv, req.Root = []string{r.RunnerPath(), "credential"}, true
	}
	if err := k.d.Exec(wctx, sb.Name, req); err != nil {
		return errors.New(err.Error() + ": " + string(errBuf.Bytes()))
	}
	return nil
}
