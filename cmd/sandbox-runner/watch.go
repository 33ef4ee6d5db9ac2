package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchMain is `sandbox-runner watch DIR [-r]`: the sandbox's file events
// under DIR (inotify, through fsnotify) as JSON lines on stdout, {"type":
// created|written|removed|renamed, "name": the path under DIR}, until the
// server ends the exec. With -r, directories under DIR are watched too,
// those made later included. A line {"type": "overflow"} says the kernel
// dropped events: the caller may have missed changes. Writes to one file
// within coalesce of each other are one event.
//
// Exit 4: DIR is not a directory; 5: no inotify.
func watchMain(args []string) int {
	if len(args) < 1 || len(args) > 2 || len(args) == 2 && args[1] != "-r" {
		fmt.Fprintln(os.Stderr, "usage: sandbox-runner watch DIR [-r]")
		return 2
	}
	root, recursive := filepath.Clean(args[0]), len(args) == 2
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		fmt.Fprintf(os.Stderr, "%s is not a directory\n", root)
		return 4
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		fmt.Fprintln(os.Stderr, "no inotify in this sandbox:", err)
		return 5
	}
	defer w.Close()
	watched := 0
	add := func(dir string) {
		if watched >= maxWatched {
			return
		}
		if w.Add(dir) == nil {
			watched++
		}
	}
	add(root)
	if recursive {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != root {
				add(p)
			}
			return nil
		})
	}
	// The first line says the watch is in place: a change made after the
	// caller read it is seen.
	enc := json.NewEncoder(os.Stdout)
	if enc.Encode(map[string]string{"type": "ready"}) != nil {
		return 1
	}
	// Writes are told once their burst has settled: a pending file is
	// told coalesce after its first write, and a write after that is
	// pending again, so the last write of a file is always told.
	pending := map[string]time.Time{}
	tick := time.NewTicker(coalesce / 2)
	defer tick.Stop()
	say := func(typ, path string) bool {
		name, err := filepath.Rel(root, path)
		if err != nil {
			return true
		}
		return enc.Encode(map[string]string{"type": typ, "name": name}) == nil
	}
	for {
		select {
		case now := <-tick.C:
			for p, t := range pending {
				if now.Sub(t) >= coalesce {
					delete(pending, p)
					if !say("written", p) {
						return 0
					}
				}
			}
		case ev, ok := <-w.Events:
			if !ok {
				return 0
			}
			typ := ""
			switch {
			case ev.Has(fsnotify.Create):
				typ = "created"
				if recursive {
					if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
						add(ev.Name)
					}
				}
			case ev.Has(fsnotify.Write):
				if _, ok := pending[ev.Name]; !ok && len(pending) < maxWatched {
					pending[ev.Name] = time.Now()
				}
				continue
			case ev.Has(fsnotify.Remove):
				typ = "removed"
			case ev.Has(fsnotify.Rename):
				typ = "renamed"
			default:
				continue
			}
			if _, ok := pending[ev.Name]; ok && typ != "created" {
				// Its writes are told before it goes.
				delete(pending, ev.Name)
				if !say("written", ev.Name) {
					return 0
				}
			}
			if !say(typ, ev.Name) {
				return 0 // the server has gone
			}
		case err, ok := <-w.Errors:
			if !ok {
				return 0
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				if enc.Encode(map[string]string{"type": "overflow"}) != nil {
					return 0
				}
			}
		}
	}
}

// Bounds: directories one watch holds, and the window in which writes to
// one file are one event.
const (
	maxWatched = 4096
	coalesce   = 100 * time.Millisecond
)
