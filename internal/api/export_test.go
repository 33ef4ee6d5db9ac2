package api

import "time"

// SetBodyIdle shortens the body's idle bound for a test; it returns the undo.
func SetBodyIdle(d time.Duration) func() {
	old := bodyIdle
	bodyIdle = d
	return func() { bodyIdle = old }
}

// MaxPerKey is the bound on one key's open requests.
const MaxPerKey = maxPerKey
