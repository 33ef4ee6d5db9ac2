package service

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Files are read and written by ordinary programs over the one exec channel;
// there is no second way into a sandbox.

// readScript tells a directory from a file by its exit status, never by
// marker bytes in the output, so any file comes back byte for byte.
const readScript = `p=$1
if [ -d "$p" ]; then ls -1Ap -- "$p" || exit 3; exit 10; fi
[ -e "$p" ] || [ -L "$p" ] || exit 4
[ -r "$p" ] || exit 5
exec cat -- "$p"`

const (
	readDir        = 10
	readNotFound   = 4
	readNoAccess   = 5
	writeNotDir    = 6
	writeDirExists = 7
)

// writeScript creates the parents, refuses to overwrite a directory, and
// copies stdin to the file.
const writeScript = `p=$1
[ -d "$p" ] && exit 7
d=$(dirname -- "$p")
mkdir -p -- "$d" 2>/dev/null || exit 6
exec cat > "$p"`

// MaxFileBytes bounds one fs read or write through the API.
const MaxFileBytes = 64 << 20

// ReadResult is either a file's bytes or a directory's entries (one per
// line, directories marked with a trailing '/').
type ReadResult struct {
	Path    string
	Dir     bool
	Data    []byte
	Entries []string
}

// Read reads a file or lists a directory.
func (s *Service) Read(ctx context.Context, id, path string) (*ReadResult, error) {
	sb, err := s.running(ctx, id)
	if err != nil {
		return nil, err
	}
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return nil, err
	}
	ctx, done := s.cmds.start(ctx, sb.ID)
	defer done()
	defer func(start time.Time) { s.cfg.Metrics.Exec("fs_read", time.Since(start)) }(time.Now())
	out := &limited{max: MaxFileBytes}
	var errb capped
	errb.max = 4096
	err = s.rt.Exec(ctx, sb.Name, runtime.ExecRequest{
		Argv: []string{"sh", "-c", readScript, "sh", full}, Dir: sb.Workdir, Stdout: out, Stderr: &errb,
	})
	defer s.touch(ctx, sb)
	if out.over {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "%s is larger than %d MiB: read it in parts with exec", full, MaxFileBytes>>20)
	}
	var exit *runtime.ExitError
	switch {
	case err == nil:
		return &ReadResult{Path: full, Data: out.buf.Bytes()}, nil
	case errors.As(err, &exit):
		switch exit.Code {
		case readDir:
			entries := strings.Split(strings.TrimSuffix(out.buf.String(), "\n"), "\n")
			if len(entries) == 1 && entries[0] == "" {
				entries = []string{}
			}
			return &ReadResult{Path: full, Dir: true, Data: out.buf.Bytes(), Entries: entries}, nil
		case readNotFound:
			return nil, sandbox.Errorf(sandbox.KindNotFound, "no such file or directory: %s", full)
		case readNoAccess:
			return nil, sandbox.Errorf(sandbox.KindInvalid, "%s is not readable", full)
		}
		return nil, sandbox.Errorf(sandbox.KindInvalid, "reading %s failed: %s", full, firstLine(errb.String()))
	default:
		return nil, channelError(ctx, err)
	}
}

// WriteResult is the answer to a write.
type WriteResult struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// Write replaces a file's content with body, creating parent directories.
func (s *Service) Write(ctx context.Context, id, path string, body io.Reader) (*WriteResult, error) {
	sb, err := s.running(ctx, id)
	if err != nil {
		return nil, err
	}
	full, err := sandbox.ResolvePath(sb.Workdir, path)
	if err != nil {
		return nil, err
	}
	if full == sb.Workdir {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "path names the workdir itself; name a file under it")
	}
	ctx, done := s.cmds.start(ctx, sb.ID)
	defer done()
	defer func(start time.Time) { s.cfg.Metrics.Exec("fs_write", time.Since(start)) }(time.Now())
	counter := &countingReader{r: body}
	var errb capped
	errb.max = 4096
	err = s.rt.Exec(ctx, sb.Name, runtime.ExecRequest{
		Argv: []string{"sh", "-c", writeScript, "sh", full}, Dir: sb.Workdir, Stdin: counter, Stderr: &errb,
	})
	defer s.touch(ctx, sb)
	var exit *runtime.ExitError
	switch {
	case err == nil:
		return &WriteResult{Path: full, Bytes: counter.n}, nil
	case counter.err != nil && !errors.Is(counter.err, io.EOF):
		// The body failed (too large, or the client went away).
		return nil, sandbox.Wrap(sandbox.KindInvalid, counter.err, "reading the request body failed: "+counter.err.Error())
	case errors.As(err, &exit):
		switch exit.Code {
		case writeDirExists:
			return nil, sandbox.Errorf(sandbox.KindConflict, "%s is a directory", full)
		case writeNotDir:
			return nil, sandbox.Errorf(sandbox.KindConflict, "cannot create the parent directories of %s", full)
		}
		return nil, sandbox.Errorf(sandbox.KindInvalid, "writing %s failed: %s", full, firstLine(errb.String()))
	default:
		return nil, channelError(ctx, err)
	}
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

type limited struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (l *limited) Write(p []byte) (int, error) {
	// Past the limit it keeps accepting and discarding, so the program
	// inside finishes instead of blocking on a full pipe.
	if l.over || l.buf.Len()+len(p) > l.max {
		l.over = true
		return len(p), nil
	}
	return l.buf.Write(p)
}

type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// channelError classifies a failed exec that was not a program's exit.
func channelError(ctx context.Context, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errStopped):
		return sandbox.Errorf(sandbox.KindConflict, "the command was stopped by a stop call")
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return sandbox.Wrap(sandbox.KindBadGateway, err, "the channel to the sandbox broke; the sandbox may have died")
}
