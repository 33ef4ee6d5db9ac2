package sandbox

import (
	"errors"
	"fmt"
)

// Kind classifies an error for the caller. The HTTP layer maps each kind to a
// status in exactly one place (internal/api); nothing else picks statuses.
type Kind int

const (
	KindInternal     Kind = iota // a bug or an unexpected failure: 500, message hidden
	KindInvalid                  // the request is malformed or refused by a rule: 400
	KindUnauthorized             // no valid principal: 401
	KindNotFound                 // unknown id, or another org's id: 404
	KindConflict                 // the state forbids it (project busy, not running): 409
	KindPayment                  // the meter refused: 402
	KindLimit                    // a burst cap: 429 with Retry-After
	KindUnavailable              // the runtime could not start the sandbox: 503
	KindBadGateway               // the channel into a running sandbox broke: 502
	KindForbidden                // a valid principal without the right (operator-only routes): 403
	KindTooLarge                 // a body or a file over the API's size limit: 413
	KindTimeout                  // the work took longer than its bound: 504
	// KindQuota: a quota that waiting does not free (disk, projects) is
	// full: 403, error kind quota_exceeded. Quotas that free themselves
	// as work ends are KindLimit (429 with Retry-After).
	KindQuota
	// KindUnsupported: this server's backend cannot do it (fork on a
	// runtime without checkpoints, say): 501.
	KindUnsupported
)

// Error carries a message that is safe to show a caller, and the internal
// cause, which is only logged.
type Error struct {
	Kind Kind
	Msg  string // safe for the client
	Err  error  // internal detail; never sent
	// RetryAfter is a hint in seconds (the answer's Retry-After) for
	// KindLimit, and for a KindUnavailable that waiting may clear (a host
	// or cluster short of room).
	RetryAfter int
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, ErrNotFound) match any *Error of the same kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Kind == e.Kind
}

// Sentinels for errors.Is; they match any Error of their kind.
var (
	ErrInvalid      = &Error{Kind: KindInvalid}
	ErrUnauthorized = &Error{Kind: KindUnauthorized}
	ErrForbidden    = &Error{Kind: KindForbidden}
	ErrNotFound     = &Error{Kind: KindNotFound}
	ErrConflict     = &Error{Kind: KindConflict}
	ErrPayment      = &Error{Kind: KindPayment}
	ErrLimit        = &Error{Kind: KindLimit}
	ErrUnavailable  = &Error{Kind: KindUnavailable}
	ErrBadGateway   = &Error{Kind: KindBadGateway}
)

// Errorf builds an Error of kind k with a client-safe message.
func Errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an Error of kind k with a client-safe message and an internal
// cause.
func Wrap(k Kind, err error, msg string) *Error {
	return &Error{Kind: k, Msg: msg, Err: err}
}

// KindOf reports the kind of err; anything that is not an *Error is internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// Message returns the client-safe message of err. Internal errors get a
// fixed sentence so their text never reaches a client.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Kind != KindInternal && e.Msg != "" {
		return e.Msg
	}
	return "internal error"
}

// String names the kind for callers that speak no HTTP (MCP tool errors).
func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindUnauthorized:
		return "unauthorized"
	case KindNotFound:
		return "not_found"
	case KindConflict:
		return "conflict"
	case KindPayment:
		return "payment_required"
	case KindLimit:
		return "rate_limited"
	case KindUnavailable:
		return "unavailable"
	case KindBadGateway:
		return "bad_gateway"
	case KindForbidden:
		return "forbidden"
	case KindTooLarge:
		return "too_large"
	case KindTimeout:
		return "timeout"
	case KindQuota:
		return "quota_exceeded"
	case KindUnsupported:
		return "unsupported"
	}
	return "internal"
}
