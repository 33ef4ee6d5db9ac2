package sandbox

import "fmt"

// Status is where a sandbox is in its life.
type Status string

const (
	StatusPending Status = "pending" // row written, container being started
	StatusRunning Status = "running" // the container runs; exec and fs work
	StatusError   Status = "error"   // the start failed; the reaper ends it
	// StatusSleeping: idle, its container removed (memory checkpointed where
	// the runtime can), row, volume and project kept; any use wakes it.
	StatusSleeping Status = "sleeping"
	// StatusEnded is where an end leads: the row is gone. It is never
	// stored and never shown; it names the target of the last transition.
	StatusEnded Status = "ended"
)

// Known reports whether s is a status a caller may filter on.
func (s Status) Known() bool {
	switch s {
	case StatusPending, StatusRunning, StatusError, StatusSleeping:
		return true
	}
	return false
}

// transitions is the closed table of status changes. Every status write of
// the service goes through CheckTransition, so a change that is not here
// (waking an error row, say, or ending a sandbox twice) is refused instead
// of being written.
var transitions = map[Status][]Status{
	// A lease starts its container (running) or fails (error); a
	// pending row stuck past its start is ended by the reaper.
	StatusPending: {StatusRunning, StatusError, StatusEnded},
	// Running sleeps (asked, idle, or its container died) or ends.
	StatusRunning: {StatusSleeping, StatusEnded},
	// A sleep in progress records what it kept (sleeping → sleeping), backs
	// off when work arrived (→ running), and a wake starts it (→ running).
	StatusSleeping: {StatusSleeping, StatusRunning, StatusEnded},
	// An error row is only ever ended.
	StatusError: {StatusEnded},
}

// CheckTransition refuses (KindConflict) a status change the table does not
// allow.
func CheckTransition(from, to Status) error {
	for _, t := range transitions[from] {
		if t == to {
			return nil
		}
	}
	return &Error{Kind: KindConflict, Msg: fmt.Sprintf("a %s sandbox cannot become %s", from, to)}
}
