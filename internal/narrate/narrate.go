// Package narrate keeps the live logs of named sessions: a command run with
// a session name appends its output here as it is produced, and followers
// (server-sent events) get the backlog and then every new event.
//
// Appending never blocks and never fails: an event is handed to the
// followers that keep up and queued for the store; a follower that falls
// behind is cut off (it resumes from its last event id, the way SSE
// clients reconnect), and when its org's queue is full the event is
// dropped from the record and counted. Each org has a queue of its own,
// bounded in bytes, and the one writer goroutine takes a batch from each
// org in turn: an org flooding its sessions fills its own queue only, and
// another org's events still reach the store in its next turn.
package narrate

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Store keeps events; every call is scoped to the org in ctx.
type Store interface {
	AppendEvents(ctx context.Context, events []store.Event) error
	Events(ctx context.Context, session string, after int64, limit int) ([]store.Event, error)
}

// Event is what a follower receives.
type Event = store.Event

const (
	// orgQueueBytes bounds the events of one org waiting for the store,
	// queueBytes those of every org together (sixteen orgs flooding at
	// once before a quiet one could lose an event).
	orgQueueBytes = 4 << 20
	queueBytes    = 64 << 20
	followerLen   = 1024 // events waiting for one follower
	batchMax      = 512  // events of one org in one transaction
	// BacklogPage is how many stored events a follower is handed at once:
	// Follow answers the first page, Backlog the next ones, so that a
	// follower never holds a whole log (up to store.KeepEvents events of
	// up to 16 KiB) in memory.
	BacklogPage = 256
)

// Log is the set of session logs of every org.
type Log struct {
	store Store
	log   *slog.Logger

	mu        sync.Mutex
	lastSeq   int64
	followers map[topic]map[*Follower]struct{}
	queues    map[string]*queue // per org, events waiting for the store
	turn      []string          // the orgs with a queue, in writing order
	queued    int64             // bytes in every queue

	wake    chan struct{} // the writer has work
	dropped atomic.Int64
	done    chan struct{}
}

type topic struct{ org, session string }

// queue is one org's events on their way to the store, in sequence order.
type queue struct {
	items []item
	bytes int64
}

// item is an event on its way to the store, or a barrier (flushed) that the
// writer closes once everything queued before it is stored.
type item struct {
	ev      Event
	flushed chan struct{}
}

// cost is what an event holds while queued.
func cost(ev Event) int64 { return int64(len(ev.Data)+len(ev.Session)+len(ev.Kind)) + 96 }

// New returns a Log writing to st. Run must be running for events to be
// stored.
func New(st Store, log *slog.Logger) *Log {
	return &Log{
		store: st, log: log,
		followers: map[topic]map[*Follower]struct{}{},
		queues:    map[string]*queue{},
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
}

// Dropped counts the events that never reached the store.
func (l *Log) Dropped() int64 { return l.dropped.Load() }

// MaxEvent bounds one event's data; a longer write becomes several events.
const MaxEvent = 16 << 10

// Append adds an event to a session of an org. It copies data and returns
// at once.
func (l *Log) Append(org, session, kind string, data []byte) {
	for len(data) > MaxEvent {
		l.append(org, session, kind, data[:MaxEvent])
		data = data[MaxEvent:]
	}
	l.append(org, session, kind, data)
}

func (l *Log) append(org, session, kind string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Sequence numbers are nanoseconds, kept strictly increasing: they grow
	// across restarts without reading the store first.
	seq := max(time.Now().UnixNano(), l.lastSeq+1)
	l.lastSeq = seq
	ev := Event{Session: session, Seq: seq, Kind: kind, Data: append([]byte(nil), data...), At: time.Now().UTC()}
	for f := range l.followers[topic{org, session}] {
		select {
		case f.ch <- ev:
		default:
			l.cutOff(f)
		}
	}
	// Queued under the lock too: each queue then holds events in sequence
	// order, and a follower's flush (which subscribes under the lock first)
	// cannot slip between handing an event out and recording it.
	c := cost(ev)
	q := l.queues[org]
	if (q != nil && q.bytes+c > orgQueueBytes) || l.queued+c > queueBytes {
		if l.dropped.Add(1)%1000 == 1 {
			l.log.Warn("session log queue full; events dropped from the record", "org", org, "dropped", l.dropped.Load())
		}
		return
	}
	l.enqueue(org, item{ev: ev}, c)
}

// enqueue adds it to org's queue and wakes the writer; l.mu is held.
func (l *Log) enqueue(org string, it item, c int64) {
	q := l.queues[org]
	if q == nil {
		q = &queue{}
		l.queues[org] = q
		l.turn = append(l.turn, org)
	}
	q.items = append(q.items, it)
	q.bytes += c
	l.queued += c
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// next takes the first batch of the org whose turn it is, which goes to the
// back of the line if it has more.
func (l *Log) next() (string, []item) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.turn) == 0 {
		return "", nil
	}
	org := l.turn[0]
	l.turn = l.turn[1:]
	q := l.queues[org]
	n := min(len(q.items), batchMax)
	batch := q.items[:n:n]
	q.items = q.items[n:]
	for _, it := range batch {
		if it.flushed == nil {
			c := cost(it.ev)
			q.bytes -= c
			l.queued -= c
		}
	}
	if len(q.items) > 0 {
		l.turn = append(l.turn, org)
	} else {
		delete(l.queues, org)
	}
	return org, batch
}

// Seed makes every later sequence number greater than seq (the highest in
// the store), so a clock stepped back across a restart cannot number new
// events below old ones.
func (l *Log) Seed(seq int64) {
	l.mu.Lock()
	l.lastSeq = max(l.lastSeq, seq)
	l.mu.Unlock()
}

// Wait returns once Run has returned.
func (l *Log) Wait() { <-l.done }

// Run writes queued events to the store until ctx ends, then writes what is
// still queued and returns.
func (l *Log) Run(ctx context.Context) {
	defer close(l.done)
	for {
		select {
		case <-l.wake:
			l.drain()
		case <-ctx.Done():
			l.drain()
			return
		}
	}
}

// drain writes batches, an org at a time in turn, until every queue is
// empty.
func (l *Log) drain() {
	for {
		org, batch := l.next()
		if batch == nil {
			return
		}
		l.write(org, batch)
	}
}

// write stores one org's batch, then closes its barriers.
func (l *Log) write(org string, batch []item) {
	events := make([]Event, 0, len(batch))
	for _, it := range batch {
		if it.flushed == nil {
			events = append(events, it.ev)
		}
	}
	if len(events) > 0 {
		ctx, cancel := context.WithTimeout(sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org}), 30*time.Second)
		if err := l.store.AppendEvents(ctx, events); err != nil {
			l.dropped.Add(int64(len(events)))
			l.log.Error("storing session events", "org", org, "events", len(events), "err", err)
		}
		cancel()
	}
	for _, it := range batch {
		if it.flushed != nil {
			close(it.flushed)
		}
	}
}

// flush waits until every event of org appended before it is stored (or
// dropped).
func (l *Log) flush(ctx context.Context, org string) error {
	b := make(chan struct{})
	l.mu.Lock()
	l.enqueue(org, item{flushed: b}, 0)
	l.mu.Unlock()
	select {
	case <-b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return nil
	}
}

// Follower receives the events of one session.
type Follower struct {
	l   *Log
	t   topic
	ch  chan Event
	cut bool // set under l.mu when it fell behind and ch was closed
}

// Backlog answers up to limit stored events of session after seq after:
// the pages of a follower's backlog past the first.
func (l *Log) Backlog(ctx context.Context, session string, after int64, limit int) ([]Event, error) {
	return l.store.Events(ctx, session, after, limit)
}

// Follow subscribes to a session of the org in ctx and returns the backlog
// after seq `after` (oldest first) and a follower for what comes next. The
// follower's channel closes when it falls behind or is closed; events it
// delivers that are already in the backlog must be skipped by seq.
func (l *Log) Follow(ctx context.Context, session string, after int64) ([]Event, *Follower, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, nil, err
	}
	f := &Follower{l: l, t: topic{org, session}, ch: make(chan Event, followerLen)}
	l.mu.Lock()
	if l.followers[f.t] == nil {
		l.followers[f.t] = map[*Follower]struct{}{}
	}
	l.followers[f.t][f] = struct{}{}
	l.mu.Unlock()
	// Subscribed first, then the store is brought up to date: every event
	// is in the backlog, on the channel, or both.
	if err := l.flush(ctx, org); err != nil {
		f.Close()
		return nil, nil, err
	}
	backlog, err := l.store.Events(ctx, session, after, BacklogPage)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return backlog, f, nil
}

// C delivers the events; it is closed when the follower fell behind.
func (f *Follower) C() <-chan Event { return f.ch }

// Close unsubscribes.
func (f *Follower) Close() {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	f.l.cutOff(f)
}

// cutOff removes f and closes its channel; l.mu is held.
func (l *Log) cutOff(f *Follower) {
	if f.cut {
		return
	}
	f.cut = true
	close(f.ch)
	m := l.followers[f.t]
	delete(m, f)
	if len(m) == 0 {
		delete(l.followers, f.t)
	}
}
