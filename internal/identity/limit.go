package identity

import (
	"context"
	"sync"
	"time"
)

// The token endpoint's bounds. An exchange is an RSA signature, so the
// endpoint, which is anyone's, bounds them twice:
//
//   - globally, by the exchanges in flight (a few per core): a request
//     waits its turn for a short while and is then told to come back, so
//     a flood costs the server its cores, never its other work;
//   - per sandbox, by a token bucket charged once the subject is known
//     (its signature checked, its sandbox live), before the signature is
//     made: one sandbox's flood of narrowing exchanges is refused at its
//     own bucket, and holds a global slot only for the moment its
//     subject takes to check, so it cannot 429 another sandbox.
const (
	// exchangeWait is how long a request waits for a global slot.
	exchangeWait = time.Second
	// sandboxBurst and sandboxRate are a sandbox's bucket: a client needs
	// one exchange per lease and narrowing, a few in a row at most.
	sandboxBurst = 10
	sandboxRate  = 2.0 // per second
	// bucketsKept is how many buckets are kept before the full ones are
	// dropped (a full bucket is the same as none).
	bucketsKept = 1024
)

// limiter is the token endpoint's two bounds.
type limiter struct {
	slots chan struct{} // exchanges in flight, all sandboxes

	mu      sync.Mutex
	buckets map[string]*bucket // by org and sandbox
	now     func() time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(inFlight int) *limiter {
	return &limiter{slots: make(chan struct{}, inFlight), buckets: map[string]*bucket{}, now: time.Now}
}

// acquire waits up to exchangeWait for a global slot; false means none
// came (or ctx ended). A true is paired with release.
func (l *limiter) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(exchangeWait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (l *limiter) release() { <-l.slots }

// allow charges one exchange to the bucket of org's sandbox id; false
// means the bucket is empty.
func (l *limiter) allow(org, id string) bool {
	key := org + "\x00" + id
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= bucketsKept {
			l.prune(now)
		}
		b = &bucket{tokens: sandboxBurst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(sandboxBurst, b.tokens+now.Sub(b.at).Seconds()*sandboxRate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// prune drops the buckets that have refilled (they allow what a new one
// would); the map then holds only sandboxes that exchanged in the last
// few seconds.
func (l *limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*sandboxRate >= sandboxBurst {
			delete(l.buckets, k)
		}
	}
}
