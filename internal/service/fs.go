package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	pathpkg "path"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Files are read and written by ordinary programs over the one exec channel;
// there is no second way into a sandbox.

// readScript tells a directory from a file by its exit status, never by
// marker bytes in the output, so any file comes back byte for byte. Only
// regular files are read: a FIFO or a device (/dev/zero) would never end.
const readScript = `p=$1
if [ -d "$p" ]; then ls -1Ap -- "$p" || exit 3; exit 10; fi
[ -e "$p" ] || [ -L "$p" ] || exit 4
[ -f "$p" ] || exit 8
[ -r "$p" ] || exit 5
exec cat -- "$p"`

const (
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
// MaxFileBytes: 413 past it) or lists a directory.
func (s *Service) Read(ctx context.Context, id, path string, max int64) (*ReadResult, error) {
	if max <= 0 || max > MaxFileBytes {
		max = MaxFileBytes
	}
	sb, work, done, err := s.use(ctx, id, true)
	if err != nil {
		return nil, err
	}
	defer done()
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return nil, err
	}
	// A file over the limit cancels the program at once (this context is
	// the work's, so the outcome is not a broken channel).
	work, cancel := context.WithCancel(work)
	defer cancel()
	out := &limited{max: int(max), over: cancel}
	errb := NewOutput(4096)
	o, err := s.run(ctx, work, sb, Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", readScript, "sh", full}, Stdout: out, Stderr: errb},
		Timeout:     s.cfg.ExecTimeout, Metric: "fs_read",
	})
	if out.exceeded {
		if max < MaxFileBytes {
			return nil, sandbox.Errorf(sandbox.KindTooLarge, "%s is larger than %d MiB, the most this read answers: GET /v1/sandbox/{id}/fs?path= answers up to %d MiB", full, max>>20, MaxFileBytes>>20)
		}
		return nil, sandbox.Errorf(sandbox.KindTooLarge, "%s is larger than %d MiB: read it in parts with exec", full, max>>20)
	}
	if err = fileOpError(o, err); err != nil {
		return nil, err
	}
	switch o.Code {
	case 0:
		return &ReadResult{Path: full, Data: out.buf.Bytes(), Woken: o.Woken}, nil
	case readDir:
		entries := strings.Split(strings.TrimSuffix(out.buf.String(), "\n"), "\n")
		if len(entries) == 1 && entries[0] == "" {
			entries = []string{}
		}
		return &ReadResult{Path: full, Dir: true, Data: out.buf.Bytes(), Entries: entries, Woken: o.Woken}, nil
	case readNotFound:
		return nil, sandbox.Errorf(sandbox.KindNotFound, "no such file or directory: %s", full)
	case readNoAccess:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "%s is not readable", full)
	case readNotRegular:
		return nil, sandbox.Errorf(sandbox.KindInvalid, "%s is not a regular file or a directory", full)
	}
	return nil, sandbox.Errorf(sandbox.KindInvalid, "reading %s failed: %s", full, firstLine(errb.String()))
}

// WriteResult is the answer to a write.
type WriteResult struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Woken bool   `json:"woken,omitempty"`
}

// Write replaces a file's content with body, creating parent
// directories. size is the body's length when known (-1 when not: a
// multipart part, a chunked upload). The sandbox is checked first (id,
// org, state, the commands quota), then the body is streamed into it, at
// most MaxFileBytes: a body over the limit, cut short, or refused changes
// nothing (413, or the reading error).
func (s *Service) Write(ctx context.Context, id, path string, body io.Reader, size int64) (*WriteResult, error) {
	if size > MaxFileBytes {
		return nil, tooLarge()
	}
	sb, work, done, err := s.use(ctx, id, true)
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
	errb := NewOutput(4096)
	o, err := s.run(ctx, work, sb, Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", writeScript, "sh", full, tmp, n}, Stdin: in, Stderr: errb},
		Timeout:     s.cfg.ExecTimeout, Metric: "fs_write",
	})
	ok := err == nil && o.Code == 0 && !o.Stopped && !o.TimedOut && in.err == nil && !in.exceeded
	if size < 0 || !ok {
		// Put the file in place, or (whatever went wrong, even a program
		// killed mid-write) leave nothing behind.
		verb := "rm"
		if ok {
			verb = "mv"
		}
		co, cerr := s.run(context.WithoutCancel(ctx), context.WithoutCancel(work), sb, Command{
			ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", commitScript, "sh", full, tmp, verb}, Stderr: errb},
			Timeout:     s.cfg.ExecTimeout, Metric: "fs_write",
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
func fileOpError(o Outcome, err error) error {
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

// limited keeps up to max bytes; past that it calls over (which cancels the
// program) and discards the rest, so the program never blocks on a full
// pipe.
type limited struct {
	buf      bytes.Buffer
	max      int
	exceeded bool
	over     func()
}

func (l *limited) Write(p []byte) (int, error) {
	if l.exceeded || l.buf.Len()+len(p) > l.max {
		if !l.exceeded {
			l.exceeded = true
			l.over()
		}
		return len(p), nil
	}
	return l.buf.Write(p)
}
