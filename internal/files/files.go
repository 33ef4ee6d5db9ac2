package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/internal/service"
	"io"
	pathpkg "path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// Files are read and written by ordinary programs over the one exec channel;
// there is no second way into a sandbox.

// readScript tells a directory from a file by its exit status and a first
// line of its own ("D", or "F SIZE" before the file's bytes), never by
// marker bytes inside the content, so any file comes back byte for byte,
// streamed. Only regular files are read: a FIFO or a device (/dev/zero)
// would never end. A file over $2 bytes is refused before a byte is sent.
const readScript = `p=$1 max=$2
if [ -d "$p" ]; then printf 'D\n'; ls -1Ap -- "$p" || exit 3; exit 10; fi
[ -e "$p" ] || [ -L "$p" ] || exit 4
[ -f "$p" ] || exit 8
[ -r "$p" ] || exit 5
n=$(stat -c %s -- "$p") || exit 9
[ "$n" -gt "$max" ] && exit 11
printf 'F %s\n' "$n"
exec cat -- "$p"`

const (
	readTooLarge   = 11
	readDir        = 10
	readNotFound   = 4
	readNoAccess   = 5
	readNotRegular = 8
	writeNotDir    = 6
	writeDirExists = 7
	writeFailed    = 9
)

// writeScript creates the parents, refuses to overwrite a directory, and
// writes stdin to a temporary file beside the target ($2, named by the
// server) that replaces the target only once complete: a failed write never
// leaves a truncated file. With the size known ($3), the script checks it
// and renames (one exec); with "-" it leaves the temporary file for
// commitScript, which the server runs once it has seen the body end well
// within the limit. The body is streamed, never held whole by the server.
const writeScript = `p=$1 t=$2 n=$3
[ -d "$p" ] && exit 7
d=$(dirname -- "$p")
mkdir -p -- "$d" 2>/dev/null || exit 6
if ! cat > "$t"; then rm -f -- "$t"; exit 9; fi
[ "$n" = - ] && exit 0
if [ "$(wc -c < "$t")" -ne "$n" ]; then rm -f -- "$t"; exit 12; fi
mv -f -- "$t" "$p" && exit 0
rm -f -- "$t"
exit 9`

// commitScript ends a write of unknown size: $3 "mv" puts the temporary file
// $2 in place of $1, anything else removes it.
const commitScript = `if [ "$3" = mv ]; then [ -d "$1" ] && { rm -f -- "$2"; exit 7; }; mv -f -- "$2" "$1" && exit 0; fi
rm -f -- "$2"
exit 9`

const writeShort = 12 // the body ended before its stated size

// MaxFileBytes bounds one fs read or write through the API.
const MaxFileBytes = 64 << 20

// ReadResult is either a file's bytes or a directory's entries (one per
// line, directories marked with a trailing '/').
type ReadResult struct {
	Path    string
	Dir     bool
	Data    []byte
	Entries []string
	Woken   bool
}

// Read reads a regular file (at most max bytes; max <= 0 means
// MaxFileBytes: 413 past it, before a byte is read) or lists a directory,
// into memory. ReadTo streams a file instead.
func (f *Files) Read(ctx context.Context, id, path string, max int64) (*ReadResult, error) {
	var buf bytes.Buffer
	res, err := f.ReadTo(ctx, id, path, max, func(h FileHead) (io.Writer, error) {
		buf.Grow(int(h.Size))
		return &buf, nil
	})
	if err != nil {
		return nil, err
	}
	if !res.Dir {
		res.Data = buf.Bytes()
	}
	return res, nil
}

// FileHead is what is known of a file before its bytes: ReadTo hands it to
// the caller's open, which answers where the bytes go.
type FileHead struct {
	Path  string
	Size  int64
	Woken bool
}

// ErrStreamBroken says a file's bytes stopped after the first had gone to
// the caller's writer: the answer has started and cannot become an error;
// the caller cuts it short (its length is the head's Size).
var ErrStreamBroken = errors.New("the file stopped before its end")

// ReadTo reads a file (at most max bytes; see Read), streaming its bytes to
// the writer open answers once the size is known, or lists a directory
// (Entries). The server holds no more of a file than a pipe's worth. Errors
// before open are ordinary; after it, ErrStreamBroken (wrapped).
func (f *Files) ReadTo(ctx context.Context, id, path string, max int64, open func(FileHead) (io.Writer, error)) (*ReadResult, error) {
	if max <= 0 || max > MaxFileBytes {
		max = MaxFileBytes
	}
	sb, work, done, err := f.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return nil, err
	}
	// A file that outgrows its head, or a caller that went away, cancels
	// the program (this context is the work's, so the outcome is not a
	// broken channel).
	work, cancel := context.WithCancel(work)
	defer cancel()
	out := &headed{open: open, head: FileHead{Path: full, Woken: sb.Woken}, dirMax: MaxFileBytes, stop: cancel}
	errb := capture.New(4096)
	o, err := f.sb.RunIn(ctx, work, sb, service.Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", readScript, "sh", full, strconv.FormatInt(max, 10)}, Stdout: out, Stderr: errb},
		Timeout:     f.execTimeout, Metric: "fs_read",
	})
	switch {
	case out.file && out.sent == out.head.Size && out.err == nil:
		return &ReadResult{Path: full, Woken: o.Woken}, nil // complete, whatever cancelled the rest
	case out.file:
		cause := err
		if cause == nil {
			cause = out.err
		}
		return nil, fmt.Errorf("%w: %d of %d bytes of %s (%v, exit %d)", ErrStreamBroken, out.sent, out.head.Size, full, cause, o.Code)
	case out.dirOver:
		return nil, sandbox.Errorf(sandbox.KindTooLarge, "the listing of %s is larger than %d MiB: list it with exec", full, MaxFileBytes>>20)
	}
	if err = fileOpError(o, err); err != nil {
		return nil, err
	}
	switch o.Code {
	case readDir:
		entries := strings.Split(strings.TrimSuffix(out.dir.String(), "\n"), "\n")
		if len(entries) == 1 && entries[0] == "" {
			entries = []string{}
		}
		return &ReadResult{Path: full, Dir: true, Data: out.dir.Bytes(), Entries: entries, Woken: o.Woken}, nil
	case readTooLarge:
		if max < MaxFileBytes {
			return nil, sandbox.Errorf(sandbox.KindTooLarge, "%s is larger than %d MiB, the most this read answers: GET /v1/sandbox/{id}/fs?path= answers up to %d MiB", full, max>>20, MaxFileBytes>>20)
		}
		return nil, sandbox.Errorf(sandbox.KindTooLarge, "%s is larger than %d MiB: read it in parts with exec", full, max>>20)
	case readNotFound:
		return nil, sandbox.Errorf(sandbox.KindNotFound, "no such file or directory: %s", full)
	case readNoAccess:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "%s is not readable", full)
	case readNotRegular:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "%s is not a regular file or a directory", full)
	}
	return nil, sandbox.Errorf(sandbox.KindInvalid, "reading %s failed: %s", full, firstLine(errb.String()))
}

// headed reads the read script's output: its first line says what follows
// ("D": a listing, kept up to dirMax; "F SIZE": SIZE bytes, streamed to
// the writer open answers, and nothing past them).
type headed struct {
	open   func(FileHead) (io.Writer, error)
	head   FileHead
	dirMax int
	stop   func()

	line    []byte
	started bool
	file    bool
	w       io.Writer
	sent    int64
	err     error
	dir     bytes.Buffer
	dirOver bool
}

func (h *headed) Write(p []byte) (int, error) {
	n := len(p)
	if !h.started {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(h.line)+len(p) > 64 {
				h.started, h.err = true, errors.New("no head line")
				h.stop()
				return n, nil
			}
			h.line = append(h.line, p...)
			return n, nil
		}
		h.line, p, h.started = append(h.line, p[:i]...), p[i+1:], true
		switch {
		case string(h.line) == "D":
		case bytes.HasPrefix(h.line, []byte("F ")):
			size, err := strconv.ParseInt(string(h.line[2:]), 10, 64)
			if err != nil || size < 0 {
				h.err = errors.New("a malformed head line")
				h.stop()
				return n, nil
			}
			h.head.Size, h.file = size, true
			if h.w, h.err = h.open(h.head); h.err != nil {
				h.stop()
				return n, nil
			}
		default:
			h.err = errors.New("an unknown head line")
			h.stop()
			return n, nil
		}
	}
	switch {
	case h.err != nil:
	case h.file:
		if room := h.head.Size - h.sent; int64(len(p)) > room {
			p = p[:room]
			defer h.stop() // the file grew after its size was read: the head's size is what is sent
		}
		if len(p) > 0 {
			m, err := h.w.Write(p)
			h.sent += int64(m)
			if err != nil {
				h.err = err
				h.stop()
			}
		}
	default:
		if h.dir.Len()+len(p) > h.dirMax {
			h.dirOver = true
			h.stop()
			return n, nil
		}
		h.dir.Write(p)
	}
	return n, nil
}

// WriteResult is the answer to a write.
type WriteResult = wire.Written

// Write replaces a file's content with body, creating parent
// directories. size is the body's length when known (-1 when not: a
// multipart part, a chunked upload). The sandbox is checked first (id,
// org, state, the commands quota), then the body is streamed into it, at
// most MaxFileBytes: a body over the limit, cut short, or refused changes
// nothing (413, or the reading error).
func (f *Files) Write(ctx context.Context, id, path string, body io.Reader, size int64) (*WriteResult, error) {
	if size > MaxFileBytes {
		return nil, tooLarge()
	}
	sb, work, done, err := f.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return nil, err
	}
	if full == sb.Workdir {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "path names the workdir itself; name a file under it")
	}
	tmp := pathpkg.Join(pathpkg.Dir(full), ".sandbox-write."+rand.Text())
	in := &bodyReader{r: body, max: MaxFileBytes}
	n := "-"
	if size >= 0 {
		n = strconv.FormatInt(size, 10)
	}
	errb := capture.New(4096)
	o, err := f.sb.RunIn(ctx, work, sb, service.Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", writeScript, "sh", full, tmp, n}, Stdin: in, Stderr: errb},
		Timeout:     f.execTimeout, Metric: "fs_write",
	})
	ok := err == nil && o.Code == 0 && !o.Stopped && !o.TimedOut && in.err == nil && !in.exceeded
	if size < 0 || !ok {
		// Put the file in place, or (whatever went wrong, even a program
		// killed mid-write) leave nothing behind.
		verb := "rm"
		if ok {
			verb = "mv"
		}
		co, cerr := f.sb.RunIn(context.WithoutCancel(ctx), context.WithoutCancel(work), sb, service.Command{
			ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", commitScript, "sh", full, tmp, verb}, Stderr: errb},
			Timeout:     f.execTimeout, Metric: "fs_write",
		})
		if ok {
			o, err = co, cerr // the commit's outcome is the write's
		}
	}
	switch {
	case in.exceeded:
		return nil, tooLarge()
	case in.err != nil:
		return nil, sandbox.Wrap(sandbox.KindInvalid, in.err, "reading the request body failed; nothing was written")
	}
	if err = fileOpError(o, err); err != nil {
		return nil, err
	}
	switch o.Code {
	case 0:
		return &WriteResult{Path: full, Bytes: in.n, Woken: o.Woken}, nil
	case writeDirExists:
		return nil, sandbox.Errorf(sandbox.KindConflict, "%s is a directory", full)
	case writeNotDir:
		return nil, sandbox.Errorf(sandbox.KindConflict, "cannot create the parent directories of %s", full)
	case writeShort:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "the body ended after %d of its %d bytes; nothing was written", in.n, size)
	}
	return nil, sandbox.Errorf(sandbox.KindInvalid, "writing %s failed: %s", full, firstLine(errb.String()))
}

func tooLarge() error {
	return sandbox.Errorf(sandbox.KindTooLarge, "files written through the API are at most %d MiB; nothing was written", MaxFileBytes>>20)
}

// bodyReader passes a request body to a program's stdin: at most max bytes
// (then exceeded, and EOF), and a reading error becomes EOF too (recorded),
// so that the program always ends and the server decides what to keep.
type bodyReader struct {
	r        io.Reader
	max, n   int64
	exceeded bool
	err      error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.exceeded || b.err != nil {
		return 0, io.EOF
	}
	if room := b.max + 1 - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.exceeded = true
		return 0, io.EOF
	}
	if err != nil && err != io.EOF {
		b.err = err
		return n, io.EOF
	}
	return n, err
}

// fileOpError is what a file operation answers for an end that is not its
// program's exit: a stop is a conflict (the caller asked for it), a timeout
// a 504 (a FIFO, say).
func fileOpError(o service.Outcome, err error) error {
	switch {
	case err != nil:
		return err
	case o.Stopped:
		return sandbox.Errorf(sandbox.KindConflict, "the command was stopped by a stop call")
	case o.TimedOut:
		return sandbox.Errorf(sandbox.KindTimeout, "the file operation took longer than allowed and was killed")
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "the program failed"
	}
	return s
}

// Sandboxes is the service's seam the files stand on: use a sandbox of
// the caller's org, and run programs in it while in use.
type Sandboxes interface {
	Use(ctx context.Context, id string) (*sandbox.Sandbox, context.Context, func(), error)
	RunIn(ctx, work context.Context, sb *sandbox.Sandbox, cmd service.Command) (service.Outcome, error)
	// Channel is a long-lived exec's context in sb (a watch waiting for
	// its stream): no command, it keeps nothing awake and ends when the
	// sandbox sleeps, is stopped or ends.
	Channel(sb *sandbox.Sandbox) (context.Context, func())
}

// Files reads and writes a sandbox's files and trees, every one through
// the sandbox's one channel (exec): a path resolves under the workdir and
// never leaves it.
type Files struct {
	sb Sandboxes
	// execTimeout bounds each file operation; maxExecTimeout an archive's
	// (the service's --exec-timeout and --max-exec-timeout).
	execTimeout, maxExecTimeout time.Duration
	// runner watches directories (watch.go); nil: no watch.
	runner  runtime.Runner
	backend string
	// watches are the running watches by id, for the streams that resume
	// them (watch.go).
	wmu     sync.Mutex
	watches map[string]*watch
	running sync.WaitGroup // the watches' goroutines
}

// New is the files of sb's sandboxes; zero timeouts take the service's
// defaults.
func New(sb Sandboxes, execTimeout, maxExecTimeout time.Duration) *Files {
	if execTimeout == 0 {
		execTimeout = service.DefaultExecTimeout
	}
	if maxExecTimeout == 0 {
		maxExecTimeout = service.DefaultMaxExecTimeout
	}
	return &Files{sb: sb, execTimeout: execTimeout, maxExecTimeout: maxExecTimeout}
}

// Joined is the service and its files as one value, for the doors that
// need both through one interface of theirs (the typed ops, the
// interpreter); their methods do not overlap.
type Joined struct {
	*service.Service
	*Files
}

// Join joins svc and f.
func Join(svc *service.Service, f *Files) Joined { return Joined{svc, f} }
