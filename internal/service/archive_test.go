package service

import (
	"archive/tar"
	"path"
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
