package files

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

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

// Watch streams the changes under directory path of sandbox id (and its
// subdirectories with recursive) to emit until ctx ends or emit fails:
// inotify in the sandbox, through the runner over the exec channel. ready
// is called once the watch is in place. While it runs the sandbox is in
// use, as with any command.
func (f *Files) Watch(ctx context.Context, id, path string, recursive bool, ready func(dir string) error, emit func(FileEvent) error) error {
	if f.runner == nil {
		return runtime.Unsupported(f.backend, runtime.CapRunner)
	}
	sb, work, done, err := f.sb.Use(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancel(work)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	argv := []string{f.runner.RunnerPath(), "watch", full}
	if recursive {
		argv = append(argv, "-r")
	}
	lw := &watchLines{ready: func() error { return ready(full) }, emit: emit, stop: cancel}
	errb := service.NewOutput(4096)
	o, err := f.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: runtime.ExecRequest{Argv: argv, Stdout: lw, Stderr: errb}, Metric: "fs_watch"})
	switch {
	case lw.err != nil:
		return lw.err
	case ctx.Err() != nil:
		return nil // the caller went: the watch's normal end
	case err != nil:
		return err
	}
	switch o.Code {
	case 4:
		return sandbox.Errorf(sandbox.KindNotFound, "no such directory: %s", full)
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
