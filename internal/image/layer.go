package image

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Layers come from registries and archives a tenant names: hostile input.
// ApplyLayer unpacks one into a rootfs being built, with every file
// operation made through an os.Root of that rootfs, so no entry — a "../"
// name, an absolute symlink followed by a later entry, a hardlink to a
// host file — can reach outside it. What a sandbox must not get from an
// image is dropped: device nodes, FIFOs, setuid and setgid bits.

// An image costs what it takes on disk, which is more than its files'
// bytes: every entry takes an inode and a directory takes a block however
// empty, so 200,000 empty directories are ~800 MiB on disk and none of it
// file bytes. The cost charged against an org's disk quota, and reported
// as an image's size, is its files' bytes and EntryCost per entry a layer
// writes; a derived image (a snapshot) adds what its copy of the base
// takes (Derive): EntryCost per directory copied, LinkCost per name
// hardlinked to the base's files.
const (
	// EntryCost is one entry a layer writes: a directory's block, or a
	// file's inode and its last, partial block.
	EntryCost = 4 << 10
	// LinkCost is one name of a base's copy hardlinked to the base's
	// inode: no inode of its own, only its directory entry.
	LinkCost = 256
)

// Limits bound what one image may unpack to.
type Limits struct {
	// Bytes bounds the image's cost (Unpacked.Cost) over all layers: the
	// org's disk quota left; 0 is unbounded.
	Bytes int64
	// Entries bounds the entries over all layers; 0 means 1,000,000.
	Entries int64
}

// Unpacked counts what the layers applied so far wrote.
type Unpacked struct {
	Bytes   int64 // regular files' bytes
	Entries int64
	Dropped int64 // devices, FIFOs and other entries not written
	// Cost is what the image takes on disk: Bytes, EntryCost per entry,
	// and what the copy of a base takes (Derive).
	Cost int64
	// made is the files (by device and inode) these layers wrote: a
	// hard link to any other — a base's, shared with it — copies it up
	// first.
	made map[fileID]bool
}

type fileID struct{ dev, ino uint64 }

func idOf(st fs.FileInfo) (fileID, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(sys.Dev), sys.Ino}, true
}

// note records name, just written, as a file of these layers.
func (u *Unpacked) note(root *os.Root, name string) {
	st, err := root.Lstat(name)
	if err != nil {
		return
	}
	if id, ok := idOf(st); ok {
		if u.made == nil {
			u.made = map[fileID]bool{}
		}
		u.made[id] = true
	}
}

// charge adds n to the cost, refusing it over the limit.
func (u *Unpacked) charge(n int64, lim Limits, what string) error {
	if lim.Bytes > 0 && u.Cost+n > lim.Bytes {
		return fmt.Errorf("%w: %s would bring it to %d bytes on disk, over %d", ErrTooLarge, what, u.Cost+n, lim.Bytes)
	}
	u.Cost += n
	return nil
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
	return applyLayer(root, "", r, lim, u)
}

// SeedDir is where an image keeps the workdir a snapshot saved (the
// workdir itself is a mount that would hide it).
const SeedDir = ".sandbox-seed"

// ApplySeedLayer applies a layer of a saved workdir: every entry must be
// SeedDir or under it (a hard link's target too), and all are written
// through a root opened at SeedDir, so that none — a name, a link an
// earlier entry made, a hard link — reaches the rest of the rootfs.
func ApplySeedLayer(root *os.Root, r io.Reader, lim Limits, u *Unpacked) error {
	// SeedDir is made a real directory first: a lower layer's link of
	// that name would lead the seed's root elsewhere in the rootfs.
	if st, err := root.Lstat(SeedDir); err == nil && !st.IsDir() {
		if err := root.Remove(SeedDir); err != nil {
			return fmt.Errorf("layer: %s: %w", SeedDir, err)
		}
	}
	if err := root.Mkdir(SeedDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("layer: %s: %w", SeedDir, err)
	}
	seed, err := root.OpenRoot(SeedDir)
	if err != nil {
		return fmt.Errorf("layer: %s: %w", SeedDir, err)
	}
	defer seed.Close()
	return applyLayer(seed, SeedDir, r, lim, u)
}

// applyLayer is ApplyLayer onto root, which is the rootfs's directory
// under ("" for the rootfs itself): every entry's name must be under it.
func applyLayer(root *os.Root, under string, r io.Reader, lim Limits, u *Unpacked) error {
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
		if err := u.charge(EntryCost, lim, "the "+strconv.FormatInt(u.Entries, 10)+"th entry"); err != nil {
			return err
		}
		name, err := entryUnder(h.Name, under)
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
		if err := mkParents(root, dir, lim, u); err != nil {
			return err
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
			if err := u.charge(h.Size, lim, name); err != nil {
				return err
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
			u.Cost += n - h.Size // a short entry fails below; charged as read
			if err != nil {
				return fmt.Errorf("layer: %s: %w", name, err)
			}
			u.note(root, name)
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
			target, err := entryUnder(h.Linkname, under)
			if err != nil {
				return err
			}
			st, err := root.Lstat(target)
			if err != nil || !st.Mode().IsRegular() {
				return fmt.Errorf("layer: hardlink %s to %s, which is not a file of the image", name, h.Linkname)
			}
			// A file these layers did not write may be a base's inode
			// (Derive's copy hardlinks them): the link's owner and mode
			// below must not reach it, so it is copied up first.
			if id, ok := idOf(st); !ok || !u.made[id] {
				if err := copyUp(root, target, st, lim, u); err != nil {
					return err
				}
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
		// A hard link's inode is one these layers wrote (or copied up):
		// its owner and mode are the link's entry's, as tar makes them.
		if err := lchown(root, name, h.Uid, h.Gid); err != nil {
			return fmt.Errorf("layer: %s: %w", name, err)
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

// mkParents makes dir and its missing parents, each charged as an entry:
// one entry of a deep name makes as many directories as it has parts.
func mkParents(root *os.Root, dir string, lim Limits, u *Unpacked) error {
	var missing int64
	for d := dir; d != "."; d = path.Dir(d) {
		if _, err := root.Lstat(d); err == nil {
			break
		}
		missing++
	}
	if missing == 0 {
		return nil
	}
	if u.Entries += missing; u.Entries > lim.Entries {
		return fmt.Errorf("%w: more than %d entries", ErrTooLarge, lim.Entries)
	}
	if err := u.charge(missing*EntryCost, lim, "the directories of "+dir); err != nil {
		return err
	}
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("layer: %s: %w", dir, err)
	}
	return nil
}

// entryUnder is entryName within the directory under ("" for the rootfs):
// the name relative to it, or an error for one outside it.
func entryUnder(n, under string) (string, error) {
	name, err := entryName(n)
	if err != nil || under == "" {
		return name, err
	}
	switch {
	case name == under:
		return ".", nil
	case strings.HasPrefix(name, under+"/"):
		return strings.TrimPrefix(name, under+"/"), nil
	}
	return "", fmt.Errorf("layer: entry %q is outside %s", n, under)
}

// copyUp replaces the file name (st) by a copy of its own — its bytes,
// mode, owner and times — so that what is done to it next leaves the
// inode it shared untouched. The copy is charged as a file written.
func copyUp(root *os.Root, name string, st fs.FileInfo, lim Limits, u *Unpacked) error {
	if err := u.charge(EntryCost+st.Size(), lim, "a copy of "+name); err != nil {
		return err
	}
	src, err := root.Open(name)
	if err != nil {
		return fmt.Errorf("layer: copy of %s: %w", name, err)
	}
	defer src.Close()
	b := make([]byte, 6)
	rand.Read(b)
	tmp := name + ".copy-up-" + hex.EncodeToString(b)
	dst, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("layer: copy of %s: %w", name, err)
	}
	n, err := io.Copy(dst, io.LimitReader(src, st.Size()))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != st.Size() {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			err = lchown(root, tmp, int(sys.Uid), int(sys.Gid))
		}
	}
	if err == nil {
		err = root.Chmod(tmp, st.Mode()&(fs.ModePerm|fs.ModeSticky))
	}
	if err == nil {
		root.Chtimes(tmp, st.ModTime(), st.ModTime())
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("layer: copy of %s: %w", name, err)
	}
	u.Bytes += n
	u.note(root, name)
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

// lchown gives name its owner. Only root can give a file to another user:
// a server that is not root (the chart's, uid 65532) applies a snapshot's
// layers only to check them — what it pushes is the cleaned tar, whose
// headers keep their owners — so there a refusal to chown is no error.
// As root (the gVisor backend unpacking an image it will run) it is.
func lchown(root *os.Root, name string, uid, gid int) error {
	err := root.Lchown(name, uid, gid)
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return nil
	}
	return err
}
