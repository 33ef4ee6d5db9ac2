// Package narrate keeps the live logs of named sessions: a command run with
// a session name appends its output here as it is produced, and followers
// (server-sent events) get the backlog and then every new event.
//
// Appending never blocks and never fails: an event is handed to the
// followers that keep up and queued for the store; a follower that falls
// behind is cut off (it resumes from its last event id, the way SSE
// clients reconnect), and when the store's queue is full the event is
// dropped from the record and counted. The store is written by one
// goroutine in batches.
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
	queueLen    = 8192 // events waiting for the store
	followerLen = 1024 // events waiting for one follower
	batchMax    = 512
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

	queue   chan item
	dropped atomic.Int64
	done    chan struct{}
}

type topic struct{ org, session string }

// item is an event on its way to the store, or a barrier (flushed) that the
// writer closes once everything queued before it is stored.
type item struct {
	org     string
	ev      Event
	flushed chan struct{}
}

// New returns a Log writing to st. Run must be running for events to be
// stored.
func New(st Store, log *slog.Logger) *Log {
	return &Log{
		store: st, log: log,
		followers: map[topic]map[*Follower]struct{}{},
		queue:     make(chan item, queueLen),
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
	// Queued under the lock too: the queue then holds events in sequence
	// order, and a follower's flush (which subscribes under the lock first)
	// cannot slip between handing an event out and recording it.
	select {
	case l.queue <- item{org: org, ev: ev}:
	default:
		if l.dropped.Add(1)%1000 == 1 {
			l.log.Warn("session log queue full; events dropped from the record", "dropped", l.dropped.Load())
		}
	}
	l.mu.Unlock()
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
		case it := <-l.queue:
			l.write(it)
		case <-ctx.Done():
			for {
				select {
				case it := <-l.queue:
					l.write(it)
				default:
					return
				}
			}
		}
	}
}

// write stores it and whatever else is queued right now, in batches per org.
func (l *Log) write(first item) {
	batch := map[string][]Event{}
	var barriers []chan struct{}
	add := func(it item) {
		if it.flushed != nil {
			barriers = append(barriers, it.flushed)
			return
		}
		batch[it.org] = append(batch[it.org], it.ev)
	}
	add(first)
	for n := 1; n < batchMax; n++ {
		select {
		case it := <-l.queue:
			add(it)
			continue
		default:
		}
		break
	}
	for org, events := range batch {
		ctx, cancel := context.WithTimeout(sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org}), 30*time.Second)
		if err := l.store.AppendEvents(ctx, events); err != nil {
			l.dropped.Add(int64(len(events)))
			l.log.Error("storing session events", "org", org, "events", len(events), "err", err)
		}
		cancel()
	}
	for _, b := range barriers {
		close(b)
	}
}

// flush waits until every event appended before it is stored (or dropped).
func (l *Log) flush(ctx context.Context) error {
	b := make(chan struct{})
	select {
	case l.queue <- item{flushed: b}:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return nil
	}
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
	if err := l.flush(ctx); err != nil {
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
