package sandbox

import (
	"errors"
	"fmt"
	"testing"
)

// TestTransitions spells out the whole table: every (from, to) pair, and
// whether it is allowed.
func TestTransitions(t *testing.T) {
	all := []Status{StatusPending, StatusRunning, StatusSleeping, StatusError, StatusEnded}
	allowed := map[[2]Status]bool{
		{StatusPending, StatusRunning}:   true, // the start worked (or recover found it running)
		{StatusPending, StatusError}:     true, // the start failed
		{StatusPending, StatusEnded}:     true, // stuck, ended by the reaper
		{StatusRunning, StatusSleeping}:  true, // sleep, idle, died, lost on restart
		{StatusRunning, StatusEnded}:     true,
		{StatusSleeping, StatusRunning}:  true, // wake; a sleep backing off
		{StatusSleeping, StatusSleeping}: true, // a sleep records its checkpoint
		{StatusSleeping, StatusEnded}:    true,
		{StatusError, StatusEnded}:       true,
	}
	for _, from := range all {
		for _, to := range all {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				err := CheckTransition(from, to)
				if allowed[[2]Status{from, to}] {
					if err != nil {
						t.Errorf("refused: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrConflict) {
					t.Errorf("allowed (or not a conflict): %v", err)
				}
			})
		}
	}
}
