package image

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// cleanEntries reads a cleaned layer back, failing on what CleanLayer
// must never write.
func cleanEntries(t testing.TB, b []byte) []*tar.Header {
	t.Helper()
	var out []*tar.Header
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("a cleaned layer does not read back: %v", err)
		}
		switch {
		case h.Mode&^0o1777 != 0:
			t.Fatalf("%s keeps mode %o", h.Name, h.Mode)
		case h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeLink:
			t.Fatalf("%s is a %c", h.Name, h.Typeflag)
		case len(h.Xattrs) != 0 || h.Uname != "" || h.Gname != "" || h.Devmajor != 0 || h.Devminor != 0: //nolint:staticcheck // Xattrs is what a node would apply
			t.Fatalf("%s keeps more than a rootfs needs: %+v", h.Name, h)
		}
		for k := range h.PAXRecords {
			if k != "path" && k != "linkpath" && k != "size" && k != "uid" && k != "gid" {
				t.Fatalf("%s keeps the PAX record %s", h.Name, k)
			}
		}
		if _, err := entryName(h.Name); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
}

// TestCleanLayer: what a sandbox's tar carries beyond a rootfs's needs —
// setuid and setgid bits, a file capability in an extended attribute, a
// FIFO, a device, user names — is not in the layer pushed; the files,
// links and directories are, byte for byte.
func TestCleanLayer(t *testing.T) {
	var raw bytes.Buffer
	w := tar.NewWriter(&raw)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "/usr/bin/su", Typeflag: tar.TypeReg, Mode: 0o6755, Size: 3, Uname: "root", Gname: "root"},
		{Name: "cap", Typeflag: tar.TypeReg, Mode: 0o755, Size: 3, PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "tmp/fifo", Typeflag: tar.TypeFifo, Mode: 0o644},
		{Name: "dev/mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1},
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "h", Typeflag: tar.TypeLink, Linkname: "/cap"},
	} {
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			w.Write([]byte("abc"))
		}
	}
	w.Close()
	var clean bytes.Buffer
	dropped, err := CleanLayer(&clean, bytes.NewReader(raw.Bytes()))
	if err != nil || dropped != 2 {
		t.Fatalf("CleanLayer: %d dropped, %v", dropped, err)
	}
	got := map[string]*tar.Header{}
	for _, h := range cleanEntries(t, clean.Bytes()) {
		got[h.Name] = h
	}
	want := map[string]int64{"./": 0o755, "usr/bin/su": 0o755, "cap": 0o755, "tmp/": 0o1777, "l": 0o644, "h": 0o644}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for name, mode := range want {
		h := got[name]
		if h == nil {
			t.Errorf("%s is missing", name)
			continue
		}
		if h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeLink && h.Mode != mode {
			t.Errorf("%s: mode %o, want %o", name, h.Mode, mode)
		}
	}
	if got["l"].Linkname != "/etc/passwd" || got["h"].Linkname != "cap" {
		t.Errorf("links: %q %q", got["l"].Linkname, got["h"].Linkname)
	}
	for _, bad := range []string{"../x", "a/../../x"} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: bad, Typeflag: tar.TypeReg})
		tw.Close()
		if _, err := CleanLayer(io.Discard, &b); err == nil {
			t.Errorf("%s: cleaned", bad)
		}
	}
}

// FuzzCleanLayer: whatever the tar, CleanLayer never panics, and what it
// writes reads back with nothing a rootfs does not need, and cleans to
// itself.
func FuzzCleanLayer(f *testing.F) {
	f.Add(layer(f, entry{name: "a/b", typ: tar.TypeReg, body: "x", mode: 0o4755}, entry{name: "l", typ: tar.TypeSymlink, link: "../../x"}))
	f.Add(layer(f, entry{name: "f", typ: tar.TypeFifo}, entry{name: "h", typ: tar.TypeLink, link: "/a/b"}))
	f.Add(layer(f, entry{name: ".wh..wh..opq", typ: tar.TypeReg}, entry{name: "d/", typ: tar.TypeDir, mode: 0o1777}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		if _, err := CleanLayer(&out, bytes.NewReader(b)); err != nil {
			return
		}
		cleanEntries(t, out.Bytes())
		var again bytes.Buffer
		if _, err := CleanLayer(&again, bytes.NewReader(out.Bytes())); err != nil || !bytes.Equal(again.Bytes(), out.Bytes()) {
			t.Fatalf("a clean layer does not clean to itself: %v", err)
		}
	})
}
