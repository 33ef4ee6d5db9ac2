package files

import (
	"archive/tar"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckEntry(t *testing.T) {
	for _, c := range []struct {
		h  tar.Header
		ok bool
	}{
		{tar.Header{Name: "a/b.txt", Typeflag: tar.TypeReg}, true},
		{tar.Header{Name: "./a/", Typeflag: tar.TypeDir}, true},
		{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a/b.txt"}, true},
		{tar.Header{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../c"}, true},
		{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "a/b.txt"}, true},
		{tar.Header{Name: "../x", Typeflag: tar.TypeReg}, false},
		{tar.Header{Name: "a/../../x", Typeflag: tar.TypeReg}, false},
		{tar.Header{Name: "a/../b", Typeflag: tar.TypeReg}, false},
		{tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg}, false},
		{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, false},
		{tar.Header{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}, false},
		{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"}, false},
		{tar.Header{Name: "dev", Typeflag: tar.TypeChar}, false},
		{tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, false},
	} {
		h := c.h
		if _, err := CheckEntry(&h); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok=%v", c.h, err, c.ok)
		}
	}
	h := tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o4755}
	if _, err := CheckEntry(&h); err != nil || h.Mode != 0o755 {
		t.Errorf("setuid kept: %o %v", h.Mode, err)
	}
}

// FuzzCheckEntry: whatever a header says, an accepted entry's name and a
// link's target stay under the directory.
func FuzzCheckEntry(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/abs", "a/../../b", "./", "a\\..\\b"} {
		f.Add(s, "t", byte(tar.TypeReg))
		f.Add(s, "../"+s, byte(tar.TypeSymlink))
	}
	f.Fuzz(func(t *testing.T, name, link string, typ byte) {
		h := tar.Header{Name: name, Linkname: link, Typeflag: typ}
		clean, err := CheckEntry(&h)
		if err != nil || clean == "" || clean == "." {
			return
		}
		out := func(p string) bool { return p == ".." || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/") }
		if out(clean) || strings.Contains(name, "..") && strings.Contains("/"+name+"/", "/../") {
			t.Fatalf("%q accepted as %q", name, clean)
		}
		if typ == tar.TypeSymlink && (strings.HasPrefix(link, "/") || out(path.Join(path.Dir(clean), link))) {
			t.Fatalf("link %q -> %q accepted", name, link)
		}
		if typ == tar.TypeLink && (strings.HasPrefix(link, "/") || out(path.Clean(link))) {
			t.Fatalf("hard link %q -> %q accepted", name, link)
		}
	})
}

// TestEntries: an archive is checked as its entries will be on disk, each
// against the ones before it; the lexical check alone passed the first
// four, whose links point out of the directory once extracted.
func TestEntries(t *testing.T) {
	sym := func(n, l string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: l} }
	hard := func(n, l string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeLink, Linkname: l} }
	reg := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeReg} }
	dir := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeDir} }
	for _, c := range []struct {
		name    string
		entries []tar.Header
		refused int // the index of the entry refused; -1: all pass
	}{
		{"through an earlier link", []tar.Header{sym("sub/y", ".."), sym("sub/x", "y/../..")}, 1},
		{"a chain of links", []tar.Header{sym("a/b/c", ".."), sym("a/b/d", "c/.."), sym("a/b/e", "d/../..")}, 1},
		{"a name made a link later", []tar.Header{sym("sub/x", "y/../.."), sym("sub/y", "..")}, 0},
		{"a hard link to a link", []tar.Header{sym("sub/deep/l", "../.."), hard("top", "sub/deep/l")}, 1},
		{"written through a link", []tar.Header{sym("up", "."), reg("up/x")}, 1},
		{"a hard link through a link", []tar.Header{reg("f"), sym("sub/l", ".."), hard("h", "sub/l/f")}, 2},
		{"a link over a directory", []tar.Header{reg("d/f"), sym("d", "..")}, 1},
		{"a directory over a link", []tar.Header{sym("d", "e"), dir("d/")}, 1},
		{"the top as a link", []tar.Header{sym("./", "..")}, 0},
		{"out lexically", []tar.Header{sym("a/l", "../../etc")}, 0},
		{"absolute", []tar.Header{sym("l", "/etc")}, 0},
		{"a hard link with ..", []tar.Header{reg("a/f"), hard("h", "a/../a/f")}, 1},
		{"up out of a directory made", []tar.Header{dir("a/b/"), sym("a/l", "b/../../a")}, -1},
		{"up out of a parent", []tar.Header{reg("a/b/f"), sym("l", "a/b/../b/f")}, -1},
		{"links to links inside", []tar.Header{reg("lib/x.so.1"), sym("lib/x.so", "x.so.1"), sym("bin/x", "../lib/x.so"), sym("y", "bin/x")}, -1},
		{"a link to a name made later", []tar.Header{sym("node_modules/.bin/t", "../t/cli.js"), reg("node_modules/t/cli.js")}, -1},
		{"a hard link", []tar.Header{reg("a/f"), hard("b/h", "a/f")}, -1},
		{"a link replaced by a file", []tar.Header{sym("l", "a"), reg("l")}, -1},
	} {
		var e Entries
		refused := -1
		for i, h := range c.entries {
			if _, err := e.Check(&h); err != nil {
				refused = i
				break
			}
		}
		if refused != c.refused {
			t.Errorf("%s: refused entry %d, want %d", c.name, refused, c.refused)
		}
	}
}

// FuzzEntries: whatever entries an archive lists, those Entries accepts,
// made on a real disk in order as tar makes them, write nothing outside
// the directory and leave no link that resolves out of it. An entry is a
// line: its type (d, f, s, h), its name, and after a '|' a link's target.
func FuzzEntries(f *testing.F) {
	for _, s := range []string{
		"ssub/y|..\nssub/x|y/../..",
		"ssub/x|y/../..\nssub/y|..",
		"sa/b/c|..\nsa/b/d|c/..\nsa/b/e|d/../..",
		"ssub/deep/l|../..\nhtop|sub/deep/l",
		"sup|.\nfup/x",
		"ff\nssub/l|..\nhh|sub/l/f",
		"fd/f\nsd|..",
		"da/b/\nsa/l|b/../../a\nfa/l/x",
		"flib/x.so.1\nslib/x.so|x.so.1\nsbin/x|../lib/x.so\nsy|bin/x\nsz|y/..",
		"sa|b\nsb|a\nfa/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		dir := t.TempDir()
		top := filepath.Join(dir, "top")
		if err := os.Mkdir(top, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(top)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		escaped := func(err error) bool { return err != nil && strings.Contains(err.Error(), "escapes") }
		var e Entries
	lines:
		for _, line := range strings.Split(list, "\n") {
			if line == "" {
				continue
			}
			name, link, _ := strings.Cut(line[1:], "|")
			h := tar.Header{Name: name, Linkname: link}
			switch line[0] {
			case 'd':
				h.Typeflag = tar.TypeDir
			case 'f':
				h.Typeflag = tar.TypeReg
			case 's':
				h.Typeflag = tar.TypeSymlink
			case 'h':
				h.Typeflag = tar.TypeLink
			default:
				return
			}
			clean, err := e.Check(&h)
			if err != nil {
				break lines // the archive is refused
			}
			if clean == "" || clean == "." {
				continue
			}
			// As tar: parents made, what is at the name removed (a
			// directory only if empty), then the entry.
			if err := root.MkdirAll(path.Dir(clean), 0o755); err != nil {
				if escaped(err) {
					t.Fatalf("%q: its parents are outside: %v", line, err)
				}
				break lines // tar fails: the archive is thrown away
			}
			if st, err := root.Lstat(clean); err == nil {
				if st.IsDir() && h.Typeflag == tar.TypeDir {
					continue
				}
				if err := root.Remove(clean); err != nil {
					break lines
				}
			}
			switch h.Typeflag {
			case tar.TypeDir:
				err = root.Mkdir(clean, 0o755)
			case tar.TypeReg:
				var w *os.File
				if w, err = root.OpenFile(clean, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
					w.Close()
				}
			case tar.TypeSymlink:
				err = root.Symlink(link, clean)
			case tar.TypeLink:
				err = root.Link(path.Clean(link), clean)
			}
			if escaped(err) {
				t.Fatalf("%q: written outside: %v", line, err)
			}
			if err != nil {
				break lines
			}
		}
		// Every link, followed (through the others), stays inside.
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			rel, _ := filepath.Rel(top, p)
			if _, err := root.Stat(rel); escaped(err) {
				t.Fatalf("after %q, the link %s resolves out: %v", list, rel, err)
			}
			return nil
		})
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("after %q, written beside the directory: %v", list, ents)
		}
	})
}
