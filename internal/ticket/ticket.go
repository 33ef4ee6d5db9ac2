// Package ticket mints the single-use credentials that open a terminal or
// a screen: a browser cannot send an Authorization header on a WebSocket,
// so the API key buys a ticket, and the ticket — bound to one org, one
// sandbox and one kind, good for 30 seconds — buys one connection.
//
// A ticket is spent BEFORE it is checked: whatever the check says, the same
// ticket never opens a second connection, so a leaked URL is worth nothing
// once used or refused. Tickets live in memory only; a restart invalidates
// them, which costs a caller one new ticket.
package ticket

import (
	"crypto/rand"
	"crypto/subtle"
	"sync"
	"time"
)

// TTL is how long a ticket is good for.
const TTL = 30 * time.Second

// Kinds of tickets.
const (
	Terminal = "terminal"
	Screen   = "screen"
)

// Ticket is what a ticket grants.
type Ticket struct {
	Org     string
	Key     string // the API key that bought it (its public id)
	Sandbox string
	Kind    string
	Expires time.Time
}

// Book holds the outstanding tickets.
type Book struct {
	now func() time.Time

	mu      sync.Mutex
	tickets map[string]Ticket
	perOrg  map[string]int
}

// New returns an empty Book; now nil means time.Now.
func New(now func() time.Time) *Book {
	if now == nil {
		now = time.Now
	}
	return &Book{now: now, tickets: map[string]Ticket{}, perOrg: map[string]int{}}
}

// MaxPerOrg bounds an org's outstanding tickets.
const MaxPerOrg = 256

// Mint issues a ticket for kind on a sandbox of org; ok is false when the
// org already holds MaxPerOrg unspent ones.
func (b *Book) Mint(org, sandbox, kind string) (token string, t Ticket, ok bool) {
	return b.MintFor(org, "", sandbox, kind)
}

// MintFor is Mint for a caller with an API key (key is its public id): the
// connection the ticket opens ends when that key is revoked.
func (b *Book) MintFor(org, key, sandbox, kind string) (token string, t Ticket, ok bool) {
	t = Ticket{Org: org, Key: key, Sandbox: sandbox, Kind: kind, Expires: b.now().Add(TTL)}
	token = "tk_" + rand.Text() + rand.Text() // 260 random bits
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.perOrg[org] >= MaxPerOrg {
		b.prune()
		if b.perOrg[org] >= MaxPerOrg {
			return "", Ticket{}, false
		}
	}
	b.tickets[token] = t
	b.perOrg[org]++
	return token, t, true
}

// Spend removes the ticket and then says whether it grants kind on sandbox
// now. A missing, expired, foreign or already spent ticket grants nothing.
func (b *Book) Spend(token, sandbox, kind string) (Ticket, bool) {
	b.mu.Lock()
	t, ok := b.tickets[token]
	if ok {
		delete(b.tickets, token)
		b.forget(t.Org)
	}
	b.mu.Unlock()
	if !ok || !b.now().Before(t.Expires) {
		return Ticket{}, false
	}
	if subtle.ConstantTimeCompare([]byte(t.Sandbox), []byte(sandbox)) != 1 || t.Kind != kind {
		return Ticket{}, false
	}
	return t, true
}

// prune drops expired tickets; b.mu is held. It runs only when an org is
// at its cap, so minting stays O(1).
func (b *Book) prune() {
	now := b.now()
	for k, t := range b.tickets {
		if !now.Before(t.Expires) {
			delete(b.tickets, k)
			b.forget(t.Org)
		}
	}
}

func (b *Book) forget(org string) {
	if b.perOrg[org]--; b.perOrg[org] <= 0 {
		delete(b.perOrg, org)
	}
}
