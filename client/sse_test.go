package client

import (
	"errors"
	"strings"
	"testing"
)

// TestReadSSE: named events with their id and joined data lines; a
// comment, the retry hint and an unnamed block are skipped; fn's error
// ends the read.
func TestReadSSE(t *testing.T) {
	in := ": ping\n\nretry: 1000\n\nid: 7\nevent: stdout\ndata: a\ndata: b\n\ndata: no name\n\nevent: end\ndata:{}\n\nevent: after\ndata: x\n\n"
	var got []sseEvent
	stop := errors.New("stop")
	err := readSSE(strings.NewReader(in), 1<<10, func(e sseEvent) error {
		got = append(got, e)
		if e.kind == "end" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || len(got) != 2 || got[0] != (sseEvent{id: "7", kind: "stdout", data: "a\nb"}) || got[1] != (sseEvent{kind: "end", data: "{}"}) {
		t.Errorf("events %+v, err %v", got, err)
	}
}
