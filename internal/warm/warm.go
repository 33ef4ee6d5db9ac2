// Package warm keeps a few sandboxes started ahead of their leases. A
// lease of the plainest kind — the exec class on its class image, no
// project, no network, this server's runtime, which is what an agent's
// "give me a sandbox and run this" is — is handed one of them instead of
// waiting for a container to start, and the pool starts its successor in
// the background. The container's start is most of a lease (a `runsc run`
// of a new bundle); with a warm one the lease is a relabel and two row
// writes.
//
// A warm sandbox has never run anything of anyone's: it is what a fresh
// start would give, made from the spec the lease would have made (the
// service's, for the id and name the lease will carry), labelled Label and
// no org's. Its lease writes its row with that id and name, then relabels
// it for its org. So an object still labelled Label is claimed by no row —
// but a pending one whose lease a crash cut between the two, which the
// service's recovery relabels before Run starts: when the pool starts it
// deletes every object labelled Label (a killed server's pool), and the
// sweep spares only those the running pool holds (Holds). When the pool
// stops it deletes what it holds; nothing is left.
package warm

import (
	"context"
	"flag"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/flagx"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Label marks a sandbox the pool holds; its lease's relabel drops it.
const Label = "sandbox.dev/warm"

// DefaultSize is how many sandboxes the pool keeps started: leases one
// after another at full speed take one every ~150 ms on two cores, while a
// start under that load takes as long or longer; with two, one lease in
// eight found none ready (BENCHMARKS.md), with four almost none did. Each
// costs ~16 MiB while it waits.
const DefaultSize = 4

// Config is the pool's part of the server's flags.
type Config struct {
	// Size is how many exec sandboxes are kept started; zero means
	// DefaultSize, negative none (the flag's 0).
	Size int64
}

// RegisterFlags binds the pool's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Size = DefaultSize
	fs.Var(flagx.Int64Off(&c.Size), "warm-pool", "gvisor: exec sandboxes kept started ahead of their leases, so that a lease of the exec class's image with no project or network skips the container's start; each costs ~16 MiB while it waits; 0 keeps none")
}

func (c Config) size() int {
	switch {
	case c.Size == 0:
		return DefaultSize
	case c.Size < 0:
		return 0
	}
	return int(c.Size)
}

// Runtime is what the pool needs of the backend.
type Runtime interface {
	Create(ctx context.Context, spec runtime.Spec) (runtime.Object, error)
	Delete(ctx context.Context, ref runtime.Ref) error
	List(ctx context.Context, selector map[string]string) ([]runtime.Object, error)
}

// Sandbox is a warm sandbox: its id (the sandbox label) and its object.
type Sandbox struct {
	ID     string
	Object runtime.Object
	// Ready is when it was ready: one that waited long may have died
	// meanwhile (see service's takeWarm).
	Ready time.Time

	release func(taken bool) // Prime's
}

// Spec is the spec of a warm sandbox of id and name: the one its lease
// would have made, labelled Label instead of with an org.
type Spec func(id, name string) runtime.Spec

// Pool keeps warm sandboxes of one class and image.
type Pool struct {
	size         int
	class, image string
	rt           Runtime
	spec         Spec
	log          *slog.Logger
	// Retry is the first wait after a failed start, doubled up to a minute;
	// zero means five seconds (a test shortens it).
	Retry time.Duration
	// Prime, if set, readies a started sandbox further before it is
	// handed out (the server starts its relay, so that the lease's first
	// command does not wait for one); release lets go of what it holds
	// when the sandbox is taken, and ends it when the sandbox is about to
	// be deleted. Set before Run.
	Prime func(ctx context.Context, w Sandbox) (release func(taken bool))

	mu    sync.Mutex
	ready []Sandbox
	// taken are the names handed out whose leases have not yet settled
	// (Settled): no row names them yet either, and the sweep spares them.
	taken   map[string]bool
	running bool // Run is on: only then is anything handed out
	kick    chan struct{}
}

// New is a pool of cfg's size of sandboxes of class on image, made from
// spec with rt; it starts nothing before Run.
func New(cfg Config, rt Runtime, class, image string, spec Spec, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{size: cfg.size(), class: class, image: image, rt: rt, spec: spec, log: log.With("component", "warm"),
		taken: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Size is how many sandboxes the pool keeps started.
func (p *Pool) Size() int { return p.size }

// Take hands out a warm sandbox of class on image, or false when there is
// none ready; its successor starts in the background. The caller owns it
// from here: it relabels it for its lease, or deletes it, and then calls
// Settled — until then the pool still Holds it.
func (p *Pool) Take(class, image string) (Sandbox, bool) {
	if p == nil || class != p.class || image != p.image {
		return Sandbox{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running || len(p.ready) == 0 {
		return Sandbox{}, false
	}
	w := p.ready[0]
	p.ready = p.ready[1:]
	p.taken[w.Object.Name] = true
	select {
	case p.kick <- struct{}{}:
	default:
	}
	w.let(true)
	return w, true
}

// Settled says the lease that took the sandbox named name is done with
// the pool: its row names it (or it was deleted).
func (p *Pool) Settled(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.taken, name)
}

// Holds says whether the object named name is one the pool holds, ready
// or taken by a lease that has not settled (the sweep spares it: no row
// claims it yet). A sandbox sits in the pool for as long as no lease
// comes, so its age says nothing: a sweep that read the rows before the
// lease wrote its row must still find it held.
func (p *Pool) Holds(name string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taken[name] {
		return true
	}
	for _, w := range p.ready {
		if w.Object.Name == name {
			return true
		}
	}
	return false
}

// Ready is how many sandboxes are ready now.
func (p *Pool) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// Run deletes the warm sandboxes a previous server left, then keeps the
// pool full until ctx ends, starting at most two at a time (a start
// competes with the leases' own for the cores); then it deletes what it
// holds.
func (p *Pool) Run(ctx context.Context) {
	if p.size <= 0 {
		return
	}
	p.purge(ctx)
	p.mu.Lock()
	p.running = true
	p.mu.Unlock()
	defer p.drain()
	retry := p.Retry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	wait := retry
	var backoff <-chan time.Time // set while a failed start's wait runs
	done := ctx.Done()
	results := make(chan error, maxStarting)
	starting := 0
	for {
		p.mu.Lock()
		short := len(p.ready)+starting < p.size
		p.mu.Unlock()
		if done != nil && backoff == nil && short && starting < maxStarting {
			starting++
			go func() { results <- p.start(ctx) }()
			continue
		}
		if done == nil && starting == 0 {
			return
		}
		select {
		case err := <-results:
			starting--
			switch {
			case err == nil:
				wait = retry
			case ctx.Err() == nil && backoff == nil:
				p.log.Warn("starting a warm sandbox; leases start their own meanwhile", "err", err, "retryIn", wait)
				backoff = time.After(wait)
				wait = min(2*wait, time.Minute)
			}
		case <-backoff:
			backoff = nil
		case <-p.kick:
		case <-done:
			done = nil // then wait for the starts under way
		}
	}
}

// maxStarting bounds the starts under way at once.
const maxStarting = 2

// start starts one warm sandbox and adds it to the ready ones; if ctx
// ended meanwhile it is deleted instead.
func (p *Pool) start(ctx context.Context) error {
	id, name := sandbox.NewID(), sandbox.NewName()
	spec := p.spec(id, name)
	obj, err := p.rt.Create(ctx, spec)
	if err != nil {
		return err
	}
	w := Sandbox{ID: id, Object: obj}
	if p.Prime != nil {
		w.release = p.Prime(ctx, w)
	}
	p.mu.Lock()
	kept := ctx.Err() == nil
	if kept {
		w.Ready = time.Now()
		p.ready = append(p.ready, w)
	}
	p.mu.Unlock()
	if !kept {
		w.let(false)
		p.delete(obj)
	}
	return nil
}

// let releases what Prime holds of w.
func (w Sandbox) let(taken bool) {
	if w.release != nil {
		w.release(taken)
	}
}

// drain stops handing out and deletes what the pool holds.
func (p *Pool) drain() {
	p.mu.Lock()
	p.running = false
	held := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, w := range held {
		w.let(false)
		p.delete(w.Object)
	}
}

// purge deletes every object labelled Label: none is claimed by a row
// (a lease relabels before it writes one), and this pool holds none yet.
func (p *Pool) purge(ctx context.Context) {
	objs, err := p.rt.List(ctx, map[string]string{Label: ""})
	if err != nil {
		p.log.Warn("listing a previous server's warm sandboxes; the sweep will find them", "err", err)
		return
	}
	for _, o := range objs {
		p.delete(o)
	}
	if len(objs) > 0 {
		p.log.Info("deleted a previous server's warm sandboxes", "count", len(objs))
	}
}

func (p *Pool) delete(o runtime.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.rt.Delete(ctx, runtime.Ref{Name: o.Name, UID: o.UID}); err != nil {
		p.log.Warn("deleting a warm sandbox", "name", o.Name, "err", err)
	}
}
