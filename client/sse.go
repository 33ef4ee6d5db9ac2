package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// sseEvent is one server-sent event: its id, its event name and its data
// lines joined by newlines.
type sseEvent struct {
	id, kind, data string
}

// readSSE calls fn with each named event of the text/event-stream r
// (lines of up to maxLine bytes) until r ends or fn fails; comments
// (": ping") and the retry hint, which name no event, are skipped.
func readSSE(r io.Reader, maxLine int, fn func(sseEvent) error) error {
	var ev sseEvent
	var data []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 16<<10), maxLine)
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.id = value
			case "event":
				ev.kind = value
			case "data":
				data = append(data, value)
			}
			continue
		}
		done := ev
		done.data = strings.Join(data, "\n")
		ev, data = sseEvent{}, nil
		if done.kind == "" {
			continue
		}
		if err := fn(done); err != nil {
			return err
		}
	}
	return sc.Err()
}

// resumeTries is how many connections in a row may bring nothing before a
// resumed stream gives up.
const resumeTries = 5

// resume reads a stream connection after connection: once reads one from
// place at and answers the place after the last event it handed on (at
// when none) and whether the stream ended. A broken connection is opened
// again after the last place seen, with a growing pause; ctx, fn's error
// (a handlerError), a refusal of the server and resumeTries connections in
// a row that bring nothing end it. what names the stream in that error.
func resume[P comparable](ctx context.Context, at P, what string, once func(P) (P, bool, error)) error {
	failed := 0
	for {
		next, ended, err := once(at)
		var h handlerError
		switch {
		case ended:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &h):
			return h.err
		case StatusOf(err) != 0:
			return err // the server refused: trying again would not help
		}
		if next != at {
			at, failed = next, 0
		} else if failed++; failed >= resumeTries {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("client: %s broke %d times in a row: %w", what, resumeTries, err)
		}
		select {
		case <-time.After(time.Duration(100<<failed) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
