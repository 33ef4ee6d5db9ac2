// Package flagx holds the flag values the parts' configs share, so that
// each kind of option is defined once.
//
// The convention they serve: a zero field of a part's Config means the
// flag's default (server.New(Config{}) behaves as `sandbox serve` with no
// flags), so "off" cannot be zero; the flag's 0 is stored as a negative
// value, which the part reads as off.
package flagx

import (
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Off is the stored form of a flag's 0 ("none", "never").
const Off = -1

// Int64Off is an int64 flag whose 0 is stored as Off; negative values
// are refused.
func Int64Off(p *int64) flag.Value { return (*int64Off)(p) }

type int64Off int64

func (v *int64Off) String() string {
	if v == nil || *v < 0 {
		return "0"
	}
	return strconv.FormatInt(int64(*v), 10)
}

func (v *int64Off) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("not a whole number: %q", s)
	case n < 0:
		return fmt.Errorf("%d: must not be negative (0 is none)", n)
	case n == 0:
		n = Off
	}
	*v = int64Off(n)
	return nil
}

// DurationOff is a duration flag whose 0 is stored as Off; negative
// durations are refused.
func DurationOff(p *time.Duration) flag.Value { return (*durationOff)(p) }

type durationOff time.Duration

func (v *durationOff) String() string {
	if v == nil || *v < 0 {
		return "0s"
	}
	return time.Duration(*v).String()
}

func (v *durationOff) Set(s string) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a duration (1h, 30m): %q", s)
	case d < 0:
		return fmt.Errorf("%v: must not be negative (0 is never)", d)
	case d == 0:
		d = Off
	}
	*v = durationOff(d)
	return nil
}
