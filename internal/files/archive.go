package files

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/internal/service"
	"io"
	"path"
	"strings"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// MaxArchiveEntries bounds the entries of one uploaded archive.
const MaxArchiveEntries = 100000

// CheckEntry refuses a tar entry that could write outside the directory it
// is extracted under: an absolute or escaping name, a link whose target
// leaves the directory, a device, a FIFO. It returns the entry's clean name.
func CheckEntry(h *tar.Header) (string, error) {
	name := strings.TrimPrefix(h.Name, "./")
	if name == "" || name == "." {
		return ".", nil // the directory itself
	}
	if strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 || strings.Contains(name, "\\") {
		return "", fmt.Errorf("entry %q: names must be relative", h.Name)
	}
	clean := path.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("entry %q leaves the directory", h.Name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("entry %q: no '..' in names", h.Name)
		}
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink:
		t := h.Linkname
		if t == "" || strings.HasPrefix(t, "/") || strings.IndexByte(t, 0) >= 0 {
			return "", fmt.Errorf("link %q -> %q points out of the directory", h.Name, h.Linkname)
		}
		// Resolved from the link's own directory, it must stay inside.
		if r := path.Join(path.Dir(clean), t); r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("link %q -> %q points out of the directory", h.Name, h.Linkname)
		}
	case tar.TypeLink:
		t := path.Clean(strings.TrimPrefix(h.Linkname, "./"))
		if h.Linkname == "" || strings.HasPrefix(h.Linkname, "/") || t == ".." || strings.HasPrefix(t, "../") {
			return "", fmt.Errorf("hard link %q -> %q points out of the directory", h.Name, h.Linkname)
		}
	case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return "", nil // read by archive/tar itself; nothing to write
	default:
		return "", fmt.Errorf("entry %q: type %q is not a file, directory or link", h.Name, string(h.Typeflag))
	}
	if h.Mode&^0o7777 != 0 {
		h.Mode &= 0o7777
	}
	h.Mode &^= 0o6000 // no setuid or setgid bits from a caller
	return clean, nil
}

// MaxArchiveNames bounds the bytes of the names an Entries keeps (the
// directories and links an archive made so far).
const MaxArchiveNames = 64 << 20

// Entries checks a tar's entries in order, as they will be on disk once
// extracted under one directory, so that no entry and no link leaves it
// however the entries combine. Each entry passes CheckEntry; then, against
// the entries before it:
//
//   - no entry is written through a symlink an earlier entry made, and a
//     hard link's target is neither a symlink (the link would be a copy of
//     it, resolved from another directory) nor reached through one;
//   - a symlink is never made where an earlier entry made a directory (a
//     directory of the archive stays one);
//   - a symlink's target is walked from the link's own directory, and a
//     '..' in it may only climb out of a directory the archive made: one
//     the link's walk reached through a symlink, or a name not made yet
//     (which a later entry could make a symlink), is refused.
//
// Why that suffices: every directory on a link's path is a real one (no
// entry goes through a symlink, none replaces a directory by one), so a
// '..' out of a directory of the archive lands where it reads; what follows
// a symlink only goes down, and every symlink, by the same rules, points
// inside. The lexical check alone passed `sub/y -> ..` then
// `sub/x -> y/../..`, which on disk is the directory's grandparent.
type Entries struct {
	dirs  map[string]bool // directories the archive made, explicitly or as parents
	links map[string]bool // symlinks the archive made
	kept  int             // bytes of the names in dirs and links
}

// Check returns the entry's clean name ("" for a header with nothing to
// write), or why the archive must be refused.
func (e *Entries) Check(h *tar.Header) (string, error) {
	if e.dirs == nil {
		e.dirs, e.links = map[string]bool{".": true}, map[string]bool{}
	}
	name, err := CheckEntry(h)
	switch {
	case err != nil || name == "":
		return name, err
	case name == "." && h.Typeflag != tar.TypeDir:
		return "", fmt.Errorf("entry %q: the directory itself can only be a directory", h.Name)
	case name == ".":
		return name, nil
	}
	if err := e.parents(h.Name, name); err != nil {
		return "", err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if e.links[name] {
			return "", fmt.Errorf("entry %q: a directory where the archive made a link", h.Name)
		}
		e.keep(e.dirs, name)
	case tar.TypeSymlink:
		if e.dirs[name] {
			return "", fmt.Errorf("link %q: where the archive made a directory", h.Name)
		}
		if err := e.walk(name, h.Linkname); err != nil {
			return "", fmt.Errorf("link %q -> %q: %w", h.Name, h.Linkname, err)
		}
		e.keep(e.links, name)
	case tar.TypeLink:
		target := path.Clean(strings.TrimPrefix(h.Linkname, "./"))
		for _, part := range strings.Split(h.Linkname, "/") {
			if part == ".." {
				return "", fmt.Errorf("hard link %q -> %q: no '..' in a hard link's target", h.Name, h.Linkname)
			}
		}
		if e.links[target] {
			return "", fmt.Errorf("hard link %q -> %q: the target is a symlink", h.Name, h.Linkname)
		}
		for dir := path.Dir(target); dir != "."; dir = path.Dir(dir) {
			if e.links[dir] {
				return "", fmt.Errorf("hard link %q -> %q goes through the link %q", h.Name, h.Linkname, dir)
			}
		}
	}
	if e.kept > MaxArchiveNames {
		return "", fmt.Errorf("the archive's names are over %d MiB", MaxArchiveNames>>20)
	}
	return name, nil
}

// parents refuses an entry under a symlink of the archive and notes its
// parents as directories. A parent already noted was checked with its own
// parents (and a directory never becomes a link), so the walk up stops
// there.
func (e *Entries) parents(raw, name string) error {
	for dir := path.Dir(name); !e.dirs[dir]; dir = path.Dir(dir) {
		if e.links[dir] {
			return fmt.Errorf("entry %q goes through the link %q", raw, dir)
		}
	}
	for dir := path.Dir(name); !e.dirs[dir]; dir = path.Dir(dir) {
		e.keep(e.dirs, dir)
	}
	return nil
}

func (e *Entries) keep(m map[string]bool, name string) {
	if !m[name] {
		m[name] = true
		e.kept += len(name)
	}
}

// walk follows a symlink's target from the link's directory: a '..' must
// climb out of a directory of the archive, never out of the top.
func (e *Entries) walk(name, target string) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.IndexByte(target, 0) >= 0 || len(target) > 4095 {
		return errors.New("points out of the directory")
	}
	cur := path.Dir(name)
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			switch {
			case cur == ".":
				return errors.New("points out of the directory")
			case !e.dirs[cur]:
				return fmt.Errorf("climbs out of %q, which is not a directory the archive made (a link, or not made yet)", cur)
			}
			cur = path.Dir(cur)
		default:
			if cur == "." {
				cur = part
			} else {
				cur += "/" + part
			}
		}
	}
	return nil
}

// Archive streams a tar of the directory at p (gzipped when gz) from the
// sandbox to w. head is called before the first byte, with the resolved
// path, so that a refusal can still be an error answer.
func (f *Files) Archive(ctx context.Context, id, p string, gz bool, head func(full string) io.Writer) error {
	sb, work, done, err := f.sb.Use(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	full, err := sandbox.ResolvePath(sb.Workdir, p)
	if err != nil {
		return err
	}
	z := ""
	if gz {
		z = "z"
	}
	// The directory is checked first: the script's exit says what is wrong
	// before a byte of the tar is sent.
	script := `[ -d "$1" ] || { [ -e "$1" ] && exit 20; exit 21; }; exec tar -C "$1" -c` + z + `f - .`
	var errb bytes.Buffer
	out := &lazyWriter{open: func() io.Writer { return head(full) }}
	o, err := f.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: runtime.ExecRequest{
		Argv: []string{"sh", "-c", script, "archive", full}, Stdin: strings.NewReader(""), Stdout: out, Stderr: &errb,
	}, Timeout: f.maxExecTimeout})
	if err != nil {
		return err
	}
	switch {
	case o.Code == 20:
		return sandbox.Errorf(sandbox.KindInvalid, "%s is not a directory; read a file with GET .../fs", full)
	case o.Code == 21:
		return sandbox.Errorf(sandbox.KindNotFound, "%s does not exist", full)
	case o.Code != 0 && !out.opened:
		return sandbox.Errorf(sandbox.KindBadGateway, "archiving %s failed: %s", full, strings.TrimSpace(lastLine(errb.String())))
	case o.Code != 0:
		return ErrStreamBroken
	}
	if !out.opened {
		out.Write(nil) // an empty directory still answers its (tiny) tar
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// lazyWriter opens its destination on the first write.
type lazyWriter struct {
	open   func() io.Writer
	w      io.Writer
	opened bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.opened {
		l.opened, l.w = true, l.open()
	}
	if len(p) == 0 {
		return 0, nil
	}
	return l.w.Write(p)
}

// ExtractResult is an extracted archive.
type ExtractResult = wire.Extracted

// Extract unpacks a tar (gzip is recognised by its magic bytes) from r
// under the directory p, creating it. Every entry is checked (CheckEntry)
// as it streams through; the archive is unpacked into a staging directory
// beside the target and moved into place only when all of it was good, so
// a refused archive writes nothing.
func (f *Files) Extract(ctx context.Context, id, p string, r io.Reader) (*ExtractResult, error) {
	sb, work, done, err := f.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	full, err := sandbox.ResolvePath(sb.Workdir, p)
	if err != nil {
		return nil, err
	}
	br := newPeekReader(r)
	var src io.Reader = br
	if magic, _ := br.peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "the body is not a valid gzip stream")
		}
		src = zr
	}
	// The sandbox's tar reads a re-written stream: only checked entries,
	// their modes cleaned, through a pipe.
	pr, pw := io.Pipe()
	res := &ExtractResult{Path: full}
	var checkErr error
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		tr, tw := tar.NewReader(src), tar.NewWriter(pw)
		var entries Entries
		for {
			h, err := tr.Next()
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				checkErr = sandbox.Errorf(sandbox.KindInvalid, "the archive is not a valid tar: %v", err)
				pw.CloseWithError(checkErr)
				return
			}
			name, err := entries.Check(h)
			if err != nil {
				checkErr = sandbox.Errorf(sandbox.KindInvalid, "the archive was refused, nothing was written: %v", err)
				pw.CloseWithError(checkErr)
				return
			}
			if name == "" {
				continue
			}
			if res.Entries++; res.Entries > MaxArchiveEntries {
				checkErr = sandbox.Errorf(sandbox.KindTooLarge, "the archive has more than %d entries", MaxArchiveEntries)
				pw.CloseWithError(checkErr)
				return
			}
			h.Name, h.Uname, h.Gname, h.Uid, h.Gid = name, "", "", 0, 0
			if h.Typeflag == tar.TypeDir {
				h.Name += "/"
			}
			if err := tw.WriteHeader(h); err != nil {
				pw.CloseWithError(err)
				return
			}
			n, err := io.Copy(tw, tr)
			res.Bytes += n
			if err != nil {
				checkErr = sandbox.Errorf(sandbox.KindInvalid, "the archive stopped short: %v", err)
				pw.CloseWithError(checkErr)
				return
			}
		}
	}()
	// Staged in a hidden directory of the workdir (the same filesystem as
	// any target under it), then merged into the target only once every
	// entry passed and tar succeeded: a refused or broken archive leaves
	// the target untouched. The merge is a second command, decided here,
	// because a stream cut by a refusal can look like a finished tar.
	stage := path.Join(sb.Workdir, ".sandbox-extract-"+strings.ToLower(sandbox.NewName()))
	// stdout and stderr are written by two goroutines: two buffers.
	var out, tarOut bytes.Buffer
	o, err := f.sb.RunIn(ctx, work, sb, service.Command{ExecRequest: runtime.ExecRequest{
		Argv:  []string{"sh", "-c", `mkdir -p "$1" && umask 0 && exec tar -x -p -f - -C "$1" --no-same-owner`, "extract", stage},
		Stdin: pr, Stdout: &tarOut, Stderr: &out,
	}, Timeout: f.maxExecTimeout})
	pr.CloseWithError(errors.New("extract ended"))
	<-checked // res and checkErr are the checker's until it is done
	finish := func(script string) (service.Outcome, error) {
		var msg, discard bytes.Buffer
		o, err := f.sb.RunIn(context.WithoutCancel(ctx), work, sb, service.Command{ExecRequest: runtime.ExecRequest{
			Argv: []string{"sh", "-c", script, "extract", stage, full}, Stdin: strings.NewReader(""), Stdout: &discard, Stderr: &msg,
		}, Timeout: f.maxExecTimeout})
		if err == nil && o.Code != 0 {
			out.Write(msg.Bytes())
		}
		return o, err
	}
	if checkErr != nil || err != nil || o.Code != 0 {
		finish(`rm -rf "$1"`)
		switch {
		case checkErr != nil:
			return nil, checkErr
		case err != nil:
			return nil, err
		}
		return nil, extractFailed(full, out.String())
	}
	if o, err := finish(`mkdir -p "$2" && cp -a "$1"/. "$2"/; c=$?; rm -rf "$1"; exit $c`); err != nil {
		return nil, err
	} else if o.Code != 0 {
		return nil, extractFailed(full, out.String())
	}
	return res, nil
}

func extractFailed(full, out string) error {
	msg := strings.TrimSpace(lastLine(out))
	if strings.Contains(out, "No space left") {
		return sandbox.Errorf(sandbox.KindTooLarge, "extracting under %s failed: no space left on the volume", full)
	}
	return sandbox.Errorf(sandbox.KindInvalid, "extracting under %s failed: %s", full, msg)
}

// peekReader lets Extract look at the first bytes before choosing gzip.
type peekReader struct {
	r   io.Reader
	buf []byte
}

func newPeekReader(r io.Reader) *peekReader { return &peekReader{r: r} }

func (p *peekReader) peek(n int) ([]byte, error) {
	for len(p.buf) < n {
		b := make([]byte, n-len(p.buf))
		k, err := p.r.Read(b)
		p.buf = append(p.buf, b[:k]...)
		if err != nil {
			return p.buf, err
		}
	}
	return p.buf[:n], nil
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		return n, nil
	}
	return p.r.Read(b)
}
