// Package keywatch ends long connections whose API key is revoked or
// expires: a terminal, a screen, an event stream or an MCP stream outlives
// the request that opened it, so the key it was opened with is asked again
// every few seconds, and the connection's context is cancelled once the
// key no longer works — whichever process revoked it (the server, or the
// CLI on its data directory).
package keywatch

import (
	"context"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Checker answers whether the key of id still works.
type Checker interface {
	KeyActive(ctx context.Context, id string) (bool, error)
}

// Every is how often a connection's key is asked again.
var Every = 5 * time.Second

// Watch returns a context cancelled when ctx ends or when the key of the
// principal in ctx stops working, and the function that stops watching.
// Work of the server's own (no key) is not watched. A check that fails
// (the store is busy) keeps the connection: it is asked again next time.
func Watch(ctx context.Context, c Checker) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	p, ok := sandbox.PrincipalFrom(ctx)
	if !ok || p.Key == "" || c == nil {
		return ctx, func() { cancel(nil) }
	}
	go func() {
		t := time.NewTicker(Every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ok, err := c.KeyActive(ctx, p.Key); err == nil && !ok {
					cancel(ErrRevoked)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// ErrRevoked is the cause of a connection ended by its key's revocation.
var ErrRevoked = sandbox.Errorf(sandbox.KindUnauthorized, "the API key of this connection was revoked or has expired")
