package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
)

// Layers come from registries and archives a tenant names: hostile input.
// ApplyLayer unpacks one into a rootfs being built, with every file
// operation made through an os.Root of that rootfs, so no entry — a "../"
// name, an absolute symlink followed by a later entry, a hardlink to a
// host file — can reach outside it. What a sandbox must not get from an
// image is dropped: device nodes, FIFOs, setuid and setgid bits.

// Limits bound what one image may unpack to.
type Limits struct {
	// Bytes bounds the regular files' bytes over all layers (the org's
	// disk quota); 0 is unbounded.
	Bytes int64
	// Entries bounds the entries over all layers; 0 means 1,000,000.
	Entries int64
}

// Unpacked counts what the layers applied so far wrote.
type Unpacked struct {
	Bytes   int64
	Entries int64
	Dropped int64 // devices, FIFOs and other entries not written
}

// ErrTooLarge is wrapped by an unpack over Limits.
var ErrTooLarge = errors.New("image over its size limit")

// Whiteouts, as the OCI image spec names them.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// ApplyLayer applies the uncompressed layer tar r onto the rootfs open as
// root: entries are written in order, whiteouts remove what lower layers
// wrote, and counts accumulate into u against lim. An entry that would
// leave the rootfs, or one over the limits, fails the whole layer (the
// caller throws the half-built rootfs away).
func ApplyLayer(root *os.Root, r io.Reader, lim Limits, u *Unpacked) error {
	if lim.Entries == 0 {
		lim.Entries = 1_000_000
	}
	tr := tar.NewReader(r)
	// What this layer wrote: an opaque whiteout hides only lower layers.
	mine := map[string]bool{}
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		if u.Entries++; u.Entries > lim.Entries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, lim.Entries)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		switch {
		case base == whiteoutOpaque:
			if err := clearDir(root, dir, mine); err != nil {
				return err
			}
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			victim := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
			if victim == "." || strings.HasPrefix(strings.TrimPrefix(base, whiteoutPrefix), ".wh.") {
				return fmt.Errorf("layer: bad whiteout %q", h.Name)
			}
			if err := root.RemoveAll(victim); err != nil {
				return fmt.Errorf("layer: whiteout %s: %w", victim, err)
			}
			continue
		}
		if name == "." && h.Typeflag != tar.TypeDir {
			return fmt.Errorf("layer: the root is a %c, not a directory", h.Typeflag)
		}
		if dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("layer: %s: %w", dir, err)
			}
		}
		// Permissions and the sticky bit (/tmp); never setuid or setgid.
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		if h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if st, err := root.Lstat(name); err == nil && !st.IsDir() {
				if err := root.Remove(name); err != nil {
					return fmt.Errorf("layer: %s: %w", name, err)
				}
			}
			if name != "." {
				if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("layer: %s: %w", name, err)
				}
			}
			dirs = append(dirs, dirTime{name, h.ModTime})
		case tar.TypeReg:
			if lim.Bytes > 0 && u.Bytes+h.Size > lim.Bytes {
				return fmt.Errorf("%w: %s would bring it to %d bytes, over %d", ErrTooLarge, name, u.Bytes+h.Size, lim.Bytes)
			}
			if err := replace(root, name); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("layer: %s: %w", name, err)
			}
			n, err := io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			u.Bytes += n
			if err != nil {
				return fmt.Errorf("layer: %s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := replace(root, name); err != nil {
				return err
			}
			// The target is not resolved here: inside the sandbox it
			// means the sandbox's own files, and every later entry is
			// written through root, which never follows it out.
			if err := root.Symlink(h.Linkname, name); err != nil {
				return fmt.Errorf("layer: %s: %w", name, err)
			}
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return err
			}
			if st, err := root.Lstat(target); err != nil || !st.Mode().IsRegular() {
				return fmt.Errorf("layer: hardlink %s to %s, which is not a file of the image", name, h.Linkname)
			}
			if err := replace(root, name); err != nil {
				return err
			}
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("layer: %s: %w", name, err)
			}
		default: // devices, FIFOs, and what a rootfs does not need
			u.Dropped++
			continue
		}
		for p := name; p != "." && !mine[p]; p = path.Dir(p) {
			mine[p] = true
		}
		if h.Typeflag == tar.TypeSymlink {
			root.Lchown(name, h.Uid, h.Gid)
			continue
		}
		if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
			return fmt.Errorf("layer: %s: %w", name, err)
		}
		if h.Typeflag == tar.TypeLink {
			continue // it shares the target's inode, mode and times
		}
		if err := root.Chmod(name, mode); err != nil {
			return fmt.Errorf("layer: %s: %w", name, err)
		}
		if h.Typeflag == tar.TypeReg {
			root.Chtimes(name, h.ModTime, h.ModTime)
		}
	}
	// A directory's time is set last: its entries changed it.
	for i := len(dirs) - 1; i >= 0; i-- {
		root.Chtimes(dirs[i].name, dirs[i].t, dirs[i].t)
	}
	return nil
}

// entryName is a tar entry's name as a path inside the rootfs ("." for the
// root itself), or an error for one that would leave it.
func entryName(n string) (string, error) {
	if strings.IndexByte(n, 0) >= 0 {
		return "", fmt.Errorf("layer: entry %q has a NUL", n)
	}
	c := path.Clean("/" + n)
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("layer: entry %q leaves the rootfs", n)
		}
	}
	if c == "/" {
		return ".", nil
	}
	return strings.TrimPrefix(c, "/"), nil
}

// replace removes what is at name unless it is a directory (a file, a
// symlink — never followed — or a hardlink), so a new entry takes its
// place.
func replace(root *os.Root, name string) error {
	st, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("layer: %s: %w", name, err)
	case st.IsDir():
		if err := root.RemoveAll(name); err != nil {
			return fmt.Errorf("layer: %s: %w", name, err)
		}
		return nil
	}
	if err := root.Remove(name); err != nil {
		return fmt.Errorf("layer: %s: %w", name, err)
	}
	return nil
}

// clearDir removes what lower layers put in dir (an opaque whiteout),
// keeping what this layer wrote.
func clearDir(root *os.Root, dir string, mine map[string]bool) error {
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("layer: opaque %s: %w", dir, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("layer: opaque %s: %w", dir, err)
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if mine[p] {
			continue
		}
		if err := root.RemoveAll(p); err != nil {
			return fmt.Errorf("layer: opaque %s: %w", p, err)
		}
	}
	return nil
}
