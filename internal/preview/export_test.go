package preview

import "time"

// SetRelayTimeout shortens the relay's start bound for a test; it returns
// the undo.
func SetRelayTimeout(d time.Duration) func() {
	old := relayTimeout
	relayTimeout = d
	return func() { relayTimeout = old }
}
