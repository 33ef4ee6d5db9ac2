package client

import (
	"bufio"
	"io"
	"strings"
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
