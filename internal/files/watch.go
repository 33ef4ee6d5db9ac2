package files

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
)

// FileEvent is one change under a watched directory.
type FileEvent = wire.FileEvent

// WithRunner gives the files the backend's in-sandbox runner, which
// watches directories (`sandbox-runner watch`); without one Watch is 501.
func (f *Files) WithRunner(r runtime.Runner, backend string) *Files {
	f.runner, f.backend = r, backend
	return f
}

// maxEventLine bounds one line of the runner's watch (a path is at most
// 4 KiB on Linux).
const maxEventLine = 8 << 10

// A watch outlives its stream by watchGrace: a client that comes back
// with the id of the last event it had (SSE's Last-Event-ID, which a
// browser's EventSource sends by itself) gets the events it missed, up to
// watchKeep of them (watchKeepBytes of names), then the live ones. A stream
// is a command of its sandbox (a slot of the org's commands quota, and it
// keeps the sandbox awake); a watch waiting for its stream is not: it runs
// on the sandbox's channel, so the sandbox may sleep, which ends it.
//
// A sandbox keeps at most maxWaiting watches waiting for their streams: a
// new one ends the longest-waiting past that, or a client opening and
// dropping streams would pile up watches (and their kept events) nothing
// counts.
const (
	watchGrace     = 30 * time.Second
	watchKeep      = 1024
	watchKeepBytes = 256 << 10
	maxWaiting     = 4
)

// watch is one running `sandbox-runner watch` and the events it said, kept
// for the streams that follow it.
type watch struct {
	id, sandbox, path string
	recursive         bool
	dir               string // path resolved in the sandbox
	cancel            context.CancelFunc

	mu      sync.Mutex
	ready   bool
	events  []FileEvent // the last ones said; events[0] is number first
	bytes   int         // of their names
	first   int64       // numbers start at 1
	changed chan struct{}
	ended   bool
	err     error
	streams int
	idle    *time.Timer
	waiting time.Time // since its last stream ended (streams == 0)
}

// at is the id of the stream's place after event n.
func (w *watch) at(n int64) string { return w.id + "." + strconv.FormatInt(n, 10) }

// broadcast wakes the streams that wait for a change; w.mu is held.
func (w *watch) broadcast() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *watch) setReady() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ready = true
	w.broadcast()
	return nil
}

func (w *watch) add(ev FileEvent) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, ev)
	w.bytes += len(ev.Name)
	for len(w.events) > watchKeep || w.bytes > watchKeepBytes {
		w.bytes -= len(w.events[0].Name)
		w.events[0] = FileEvent{}
		w.events = w.events[1:]
		w.first++
	}
	w.broadcast()
	return nil
}

func (w *watch) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended, w.err = true, err
	w.broadcast()
}

// Watch streams the changes under directory path of sandbox id (and its
// subdirectories with recursive) to emit until ctx ends or emit fails:
// inotify in the sandbox, through the runner over the exec channel. ready
// is called once the watch is in place, with the id of that place; emit
// with each event and its id. resume is the id of the last event a client
// had of an earlier stream of the same watch ("" for a new watch): the
// events after it are sent first, with an overflow event where some are no
// longer kept; a watch that has ended (past watchGrace, or the server
// restarted) is begun anew, its overflow first.
func (f *Files) Watch(ctx context.Context, id, path string, recursive bool, resume string, ready func(dir, at string) error, emit func(at string, ev FileEvent) error) error {
	if f.runner == nil {
		return runtime.Unsupported(f.backend, runtime.CapRunner)
	}
	// The stream: a command of the sandbox while it is open.
	sb, _, done, err := f.sb.Use(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	w, from, missed, err := f.resumeWatch(ctx, sb, path, recursive, resume)
	if err != nil {
		return err
	}
	if w == nil {
		if w, err = f.startWatch(ctx, sb, path, recursive); err != nil {
			return err
		}
		from = -1
	}
	defer f.detach(w)
	return w.follow(ctx, from, missed, ready, emit)
}

// resumeWatch finds the watch resume names, attached to one more stream,
// and the number of the last event its client had. No watch (and no
// error) when resume is empty or its watch is gone: missed then says
// whether the client had one.
func (f *Files) resumeWatch(ctx context.Context, sb *sandbox.Sandbox, path string, recursive bool, resume string) (w *watch, from int64, missed bool, err error) {
	if resume == "" {
		return nil, 0, false, nil
	}
	wid, from, err := parseResume(resume)
	if err != nil {
		return nil, 0, false, err
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	w = f.watches[wid]
	// Another sandbox's or directory's watch is no watch of this stream's
	// (the sandbox is the caller's org's: Use said so): begun anew, as if
	// it had ended.
	if w == nil || w.sandbox != sb.ID || w.path != path || w.recursive != recursive {
		return nil, 0, true, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil, 0, true, nil
	}
	w.streams++
	if w.idle != nil {
		w.idle.Stop()
	}
	return w, min(from, w.first+int64(len(w.events))-1), false, nil
}

// parseResume reads a stream's place, "<watch>.<n>" (the id of its last
// event), as a client sends it back.
func parseResume(s string) (watch string, n int64, err error) {
	watch, num, ok := strings.Cut(s, ".")
	n, perr := strconv.ParseInt(num, 10, 64)
	if !ok || perr != nil || n < 0 || watch == "" || len(watch) > 64 {
		return "", 0, sandbox.Errorf(sandbox.KindInvalid, "Last-Event-ID must be an id from this stream")
	}
	return watch, n, nil
}

// startWatch runs a new watch in sb, a sandbox in use by the caller, and
// waits until it is in place (or could not be: no such directory, …).
func (f *Files) startWatch(ctx context.Context, sb *sandbox.Sandbox, path string, recursive bool) (*watch, error) {
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return nil, err
	}
	// The watch is the sandbox's channel's, not the request's: it outlives
	// its stream by watchGrace, and a sleep ends it.
	life, release := f.sb.Channel(sb)
	life, cancel := context.WithCancel(life)
	w := &watch{id: rand.Text()[:16], sandbox: sb.ID, path: path, recursive: recursive, dir: full,
		cancel: cancel, first: 1, changed: make(chan struct{}), streams: 1}
	f.running.Add(1)
	go func() {
		defer f.running.Done()
		defer release()
		defer cancel()
		err := f.runWatch(context.WithoutCancel(ctx), life, sb, w)
		f.wmu.Lock()
		delete(f.watches, w.id)
		f.wmu.Unlock()
		w.end(err)
	}()
	w.mu.Lock()
	for !w.ready && !w.ended {
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
		w.mu.Lock()
	}
	ready, err := w.ready, w.err
	w.mu.Unlock()
	if !ready {
		return nil, cmp.Or(err, errors.New("the watch ended before it was in place"))
	}
	f.wmu.Lock()
	if f.watches == nil {
		f.watches = map[string]*watch{}
	}
	f.watches[w.id] = w
	f.wmu.Unlock()
	return w, nil
}

// endWaiting ends the watches of sandbox id that wait for a stream past
// the maxWaiting that waited least (a stream's end calls it); f.wmu is held.
func (f *Files) endWaiting(id string) {
	var waiting []*watch
	for _, w := range f.watches {
		w.mu.Lock()
		if w.sandbox == id && w.streams == 0 && !w.ended {
			waiting = append(waiting, w)
		}
		w.mu.Unlock()
	}
	if len(waiting) <= maxWaiting {
		return
	}
	slices.SortFunc(waiting, func(a, b *watch) int { return b.waiting.Compare(a.waiting) }) // the latest first
	for _, w := range waiting[maxWaiting:] {
		w.cancel()
	}
}

// Close ends every watch, the ones waiting for their streams to come back
// too, and waits for them: the server's shutdown.
func (f *Files) Close() {
	f.wmu.Lock()
	for _, w := range f.watches {
		w.cancel()
	}
	f.wmu.Unlock()
	f.running.Wait()
}

// detach ends a stream of w: the last one leaves w running for watchGrace.
func (f *Files) detach(w *watch) {
	w.mu.Lock()
	if w.streams--; w.streams > 0 || w.ended {
		w.mu.Unlock()
		return
	}
	w.waiting = time.Now()
	w.idle = time.AfterFunc(watchGrace, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.streams == 0 {
			w.cancel()
		}
	})
	w.mu.Unlock()
	f.wmu.Lock()
	f.endWaiting(w.sandbox)
	f.wmu.Unlock()
}

// follow streams w from after event number from (-1: from now): ready, an
// overflow where the client missed events (missed, or no longer kept),
// then the events.
func (w *watch) follow(ctx context.Context, from int64, missed bool, ready func(dir, at string) error, emit func(at string, ev FileEvent) error) error {
	if from < 0 {
		w.mu.Lock()
		from = w.first + int64(len(w.events)) - 1
		w.mu.Unlock()
	}
	if err := ready(w.dir, w.at(from)); err != nil {
		return err
	}
	if missed {
		if err := emit(w.at(from), FileEvent{Type: "overflow"}); err != nil {
			return err
		}
	}
	next := from + 1
	for {
		w.mu.Lock()
		lost := next < w.first
		if lost {
			next = w.first
		}
		batch := append([]FileEvent(nil), w.events[next-w.first:]...)
		ended, err, changed := w.ended, w.err, w.changed
		w.mu.Unlock()
		if lost {
			if err := emit(w.at(next-1), FileEvent{Type: "overflow"}); err != nil {
				return err
			}
		}
		for _, ev := range batch {
			if err := emit(w.at(next), ev); err != nil {
				return err
			}
			next++
		}
		if len(batch) > 0 {
			continue
		}
		if ended {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil // the caller went: the stream's normal end
		}
	}
}

// runWatch runs the runner's watch of w.dir in sb until work ends.
func (f *Files) runWatch(ctx, work context.Context, sb *sandbox.Sandbox, w *watch) error {
	argv := []string{f.runner.RunnerPath(), "watch", w.dir}
	if w.recursive {
		argv = append(argv, "-r")
	}
	run, stop := context.WithCancel(work)
	defer stop()
	lw := &watchLines{ready: w.setReady, emit: w.add, stop: stop}
	errb := capture.New(4096)
	o, err := f.sb.RunIn(ctx, run, sb, service.Command{ExecRequest: runtime.ExecRequest{Argv: argv, Stdout: lw, Stderr: errb}, Metric: "fs_watch"})
	switch {
	case lw.err != nil:
		return lw.err
	case work.Err() != nil:
		return nil // no stream came back in time, or the sandbox sleeps or stopped: the watch's normal end
	case err != nil:
		return err
	}
	switch o.Code {
	case 4:
		return sandbox.Errorf(sandbox.KindNotFound, "no such directory: %s", w.dir)
	case 5:
		return sandbox.Errorf(sandbox.KindBadGateway, "this sandbox cannot watch files: %s", firstLine(errb.String()))
	case 0:
		return nil
	}
	return sandbox.Errorf(sandbox.KindConflict, "this sandbox's runner cannot watch files (exit %d; a sandbox started before watches existed: lease a new one)", o.Code)
}

// watchLines reads the runner's watch: a JSON line per event, the first
// {"type": "ready"}. What the runner says is checked (it runs beside the
// sandbox's code): a line that is not an event ends the watch.
type watchLines struct {
	buf   []byte
	seen  bool
	ready func() error
	emit  func(FileEvent) error
	stop  context.CancelFunc
	err   error
}

var watchTypes = map[string]bool{"created": true, "written": true, "removed": true, "renamed": true, "overflow": true}

func (w *watchLines) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := w.buf[:i]
		w.buf = w.buf[i+1:]
		if err := w.line(line); err != nil {
			w.err = err
			w.stop()
			return 0, err
		}
	}
	if len(w.buf) > maxEventLine {
		w.err = sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's watch said nonsense")
		w.stop()
		return 0, w.err
	}
	return len(p), nil
}

func (w *watchLines) line(line []byte) error {
	var ev FileEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's watch said nonsense")
	}
	if !w.seen {
		if ev.Type != "ready" {
			return sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's watch said nonsense")
		}
		w.seen = true
		return w.ready()
	}
	if !watchTypes[ev.Type] || strings.IndexByte(ev.Name, 0) >= 0 || len(ev.Name) > 4096 || strings.HasPrefix(ev.Name, "../") || ev.Name == ".." {
		return sandbox.Errorf(sandbox.KindBadGateway, "the sandbox's watch said nonsense")
	}
	return w.emit(ev)
}
