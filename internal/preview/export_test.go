package preview

import "time"

// SetRelayTimeout shortens the relay's start bound for a test; it returns
// the undo.
func SetRelayTimeout(d time.Duration) func() {
	old := relayTimeout
	relayTimeout = d
	return func() { relayTimeout = old }
}

// SetRelayLinger shortens how long an unused relay is kept; it returns
// the undo.
func SetRelayLinger(d time.Duration) func() {
	old := relayLinger
	relayLinger = d
	return func() { relayLinger = old }
}
