package service

import (
	"bytes"
	"context"
	"io"
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
// writes stdin to a temporary file beside the target that replaces it only
// once complete: a failed write never leaves a truncated file.
const writeScript = `p=$1
[ -d "$p" ] && exit 7
d=$(dirname -- "$p")
mkdir -p -- "$d" 2>/dev/null || exit 6
t=$(mktemp "$d/.sandbox-write.XXXXXX") || exit 9
if cat > "$t" && mv -f -- "$t" "$p"; then exit 0; fi
rm -f -- "$t"
exit 9`

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

// Read reads a regular file or lists a directory.
func (s *Service) Read(ctx context.Context, id, path string) (*ReadResult, error) {
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
	out := &limited{max: MaxFileBytes, over: cancel}
	errb := NewOutput(4096)
	o, err := s.run(ctx, work, sb, Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", readScript, "sh", full}, Stdout: out, Stderr: errb},
		Timeout:     s.cfg.ExecTimeout, Metric: "fs_read",
	})
	if out.exceeded {
		return nil, sandbox.Errorf(sandbox.KindTooLarge, "%s is larger than %d MiB: read it in parts with exec", full, MaxFileBytes>>20)
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

// Write replaces a file's content with body, creating parent directories.
// The body is read whole (up to MaxFileBytes) before the sandbox is touched,
// so a failed or oversized upload changes nothing.
func (s *Service) Write(ctx context.Context, id, path string, body io.Reader) (*WriteResult, error) {
	data, err := io.ReadAll(io.LimitReader(body, MaxFileBytes+1))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.KindInvalid, err, "reading the request body failed")
	}
	if len(data) > MaxFileBytes {
		return nil, sandbox.Errorf(sandbox.KindTooLarge, "files written through the API are at most %d MiB", MaxFileBytes>>20)
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
	errb := NewOutput(4096)
	o, err := s.run(ctx, work, sb, Command{
		ExecRequest: runtime.ExecRequest{Argv: []string{"sh", "-c", writeScript, "sh", full}, Stdin: bytes.NewReader(data), Stderr: errb},
		Timeout:     s.cfg.ExecTimeout, Metric: "fs_write",
	})
	if err = fileOpError(o, err); err != nil {
		return nil, err
	}
	switch o.Code {
	case 0:
		return &WriteResult{Path: full, Bytes: int64(len(data)), Woken: o.Woken}, nil
	case writeDirExists:
		return nil, sandbox.Errorf(sandbox.KindConflict, "%s is a directory", full)
	case writeNotDir:
		return nil, sandbox.Errorf(sandbox.KindConflict, "cannot create the parent directories of %s", full)
	}
	return nil, sandbox.Errorf(sandbox.KindInvalid, "writing %s failed: %s", full, firstLine(errb.String()))
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
