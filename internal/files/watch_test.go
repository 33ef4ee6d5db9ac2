package files

import (
	"context"
	"strings"
	"testing"
)

// TestWatchKeepsTheLast: a watch keeps its last watchKeep events (and no
// more than watchKeepBytes of names); a stream resuming before them is told
// it missed some (overflow, its id the place before the first kept), then
// gets every kept one with its own id, and ends with the watch.
func TestWatchKeepsTheLast(t *testing.T) {
	w := &watch{id: "w", first: 1, changed: make(chan struct{})}
	for range watchKeep + 76 {
		w.add(FileEvent{Type: "created", Name: "f"})
	}
	w.end(nil)
	if w.first != 77 || len(w.events) != watchKeep {
		t.Fatalf("kept %d from %d", len(w.events), w.first)
	}
	var ids, types []string
	readyAt := ""
	err := w.follow(context.Background(), 5, false, func(_, at string) error { readyAt = at; return nil }, func(at string, ev FileEvent) error {
		ids, types = append(ids, at), append(types, ev.Type)
		return nil
	})
	if err != nil || readyAt != "w.5" || len(ids) != watchKeep+1 || types[0] != "overflow" || ids[0] != "w.76" || ids[1] != "w.77" || ids[len(ids)-1] != "w.1100" {
		t.Errorf("err %v, ready at %s, %d events: %v … %v", err, readyAt, len(ids), ids[:3], ids[len(ids)-1])
	}

	// Long names: the bytes bound the kept ones.
	w = &watch{id: "w", first: 1, changed: make(chan struct{})}
	for range 300 {
		w.add(FileEvent{Type: "written", Name: strings.Repeat("n", 1000)})
	}
	if w.bytes > watchKeepBytes || len(w.events) != watchKeepBytes/1000 {
		t.Errorf("kept %d events, %d bytes", len(w.events), w.bytes)
	}

	// A stream from now sees only what comes after it began.
	w = &watch{id: "w", first: 1, changed: make(chan struct{})}
	w.add(FileEvent{Type: "created", Name: "before"})
	got := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- w.follow(ctx, -1, false, func(_, at string) error { got <- "ready " + at; return nil }, func(at string, ev FileEvent) error {
			got <- at + " " + ev.Name
			return nil
		})
	}()
	if r := <-got; r != "ready w.1" {
		t.Errorf("ready: %s", r)
	}
	w.add(FileEvent{Type: "created", Name: "after"})
	if r := <-got; r != "w.2 after" {
		t.Errorf("live: %s", r)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("a stream whose caller went: %v", err)
	}
}

// FuzzParseResume: a client's Last-Event-ID is its own to make up: any
// string is refused or read as a watch and a place that this server's own
// id of them reads back as, never a negative place or an empty watch.
func FuzzParseResume(f *testing.F) {
	for _, s := range []string{"ABCDEFGHIJKLMNOP.0", "w.1100", ".3", "w.", "w.-1", "w.1.2", "12", "", "w.9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, n, err := parseResume(s)
		if err != nil {
			return
		}
		if w == "" || n < 0 || strings.Contains(w, ".") {
			t.Fatalf("%q read as %q, %d", s, w, n)
		}
		if w2, n2, err := parseResume((&watch{id: w}).at(n)); err != nil || w2 != w || n2 != n {
			t.Fatalf("%q read as %q, %d, which reads back as %q, %d, %v", s, w, n, w2, n2, err)
		}
	})
}
