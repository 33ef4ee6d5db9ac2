package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	size       int64 // for a header that claims more than body
}

func layer(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Uid: 1000, Gid: 1000}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
	}
	w.Close()
	return b.Bytes()
}

// rootfsIn makes DIR/rootfs and DIR/outside (which nothing may touch).
func rootfsIn(t testing.TB) (*os.Root, string, string) {
	dir := t.TempDir()
	rootfs, outside := filepath.Join(dir, "rootfs"), filepath.Join(dir, "outside")
	os.Mkdir(rootfs, 0o755)
	os.Mkdir(outside, 0o755)
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, rootfs, outside
}

func apply(t testing.TB, r *os.Root, lim Limits, u *Unpacked, layers ...[]byte) error {
	for _, l := range layers {
		if err := ApplyLayer(r, bytes.NewReader(l), lim, u); err != nil {
			return err
		}
	}
	return nil
}

func TestApplyLayers(t *testing.T) {
	r, rootfs, _ := rootfsIn(t)
	var u Unpacked
	err := apply(t, r, Limits{}, &u,
		layer(t,
			entry{name: "bin/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "bin/tool", typ: tar.TypeReg, mode: 0o4755, body: "#!/bin/sh\n"},
			entry{name: "bin/same", typ: tar.TypeLink, link: "bin/tool"},
			entry{name: "bin/sh", typ: tar.TypeSymlink, link: "/bin/tool"},
			entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
			entry{name: "dev/null", typ: tar.TypeChar},
			entry{name: "fifo", typ: tar.TypeFifo},
			entry{name: "etc/gone", typ: tar.TypeReg, body: "x"},
			entry{name: "etc/dir/a", typ: tar.TypeReg, body: "a"},
		),
		layer(t,
			entry{name: "etc/.wh.gone", typ: tar.TypeReg},
			entry{name: "etc/dir/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "etc/dir/.wh..wh..opq", typ: tar.TypeReg},
			entry{name: "etc/dir/b", typ: tar.TypeReg, body: "b"},
			entry{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "v2\n"},
		))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(rootfs, "bin/same"))
	if err != nil || st.Mode()&os.ModeSetuid != 0 {
		t.Errorf("the hardlink of a setuid file: %v %v", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(rootfs, "bin/tool")); string(b) != "v2\n" {
		t.Errorf("bin/tool: %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(rootfs, "bin/sh")); l != "/bin/tool" {
		t.Errorf("symlink: %q", l)
	}
	if st, _ := os.Stat(filepath.Join(rootfs, "tmp")); st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("/tmp mode %v", st.Mode())
	}
	for _, gone := range []string{"dev/null", "fifo", "etc/gone", "etc/dir/a"} {
		if _, err := os.Lstat(filepath.Join(rootfs, gone)); !os.IsNotExist(err) {
			t.Errorf("%s is there: %v", gone, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(rootfs, "etc/dir/b")); string(b) != "b" {
		t.Errorf("the opaque dir lost this layer's file: %q", b)
	}
	if u.Dropped != 2 {
		t.Errorf("dropped %d, want the device and the FIFO", u.Dropped)
	}
}

// TestApplyLayerHostile: every way a layer may try to leave the rootfs
// fails, and nothing outside it changes.
func TestApplyLayerHostile(t *testing.T) {
	cases := map[string][][]byte{
		"dotdot":             {layer(t, entry{name: "../outside/x", typ: tar.TypeReg, body: "x"})},
		"deep dotdot":        {layer(t, entry{name: "a/../../outside/x", typ: tar.TypeReg, body: "x"})},
		"through a symlink":  {layer(t, entry{name: "evil", typ: tar.TypeSymlink, link: "../outside"}, entry{name: "evil/x", typ: tar.TypeReg, body: "x"})},
		"absolute symlink":   {layer(t, entry{name: "evil", typ: tar.TypeSymlink, link: "/"}, entry{name: "evil/outside/x", typ: tar.TypeReg, body: "x"})},
		"hardlink out":       {layer(t, entry{name: "h", typ: tar.TypeLink, link: "../outside/secret"})},
		"dir through link":   {layer(t, entry{name: "d", typ: tar.TypeSymlink, link: "../outside"}, entry{name: "d/sub/", typ: tar.TypeDir})},
		"whiteout of parent": {layer(t, entry{name: ".wh...", typ: tar.TypeReg})},
	}
	for name, layers := range cases {
		t.Run(name, func(t *testing.T) {
			r, _, outside := rootfsIn(t)
			os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
			err := apply(t, r, Limits{}, &Unpacked{}, layers...)
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 || ents[0].Name() != "secret" {
				t.Errorf("outside the rootfs now: %v (err %v)", ents, err)
			}
			if err == nil {
				t.Errorf("no error")
			}
		})
	}
	// A whiteout of "/" clears the lower layers, and only them.
	r, rootfs, outside := rootfsIn(t)
	if err := apply(t, r, Limits{}, &Unpacked{}, layer(t, entry{name: "a", typ: tar.TypeReg, body: "a"}),
		layer(t, entry{name: ".wh..wh..opq", typ: tar.TypeReg}, entry{name: "b", typ: tar.TypeReg, body: "b"})); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(rootfs); len(ents) != 1 || ents[0].Name() != "b" {
		t.Errorf("after a whiteout of /: %v", ents)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("outside: %v", err)
	}
}

// TestApplyLayerSizeLimit: a 10 GiB file over the limit is refused from its
// header, before a byte is written.
func TestApplyLayerSizeLimit(t *testing.T) {
	r, rootfs, _ := rootfsIn(t)
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	w.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 10 << 30})
	w.Write(make([]byte, 1<<20)) // the rest never comes: the header is enough
	err := ApplyLayer(r, bytes.NewReader(b.Bytes()), Limits{Bytes: 1 << 30}, &Unpacked{})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 10 GiB entry under a 1 GiB limit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "big")); !os.IsNotExist(err) {
		t.Errorf("big was written: %v", err)
	}
}

// FuzzApplyLayer: no layer writes outside the rootfs or panics, none
// changes a file it shares with a base (a hard link's owner and mode go to
// a copy), and a saved workdir's layer (ApplySeedLayer) writes nothing of
// the rootfs but SeedDir.
func FuzzApplyLayer(f *testing.F) {
	f.Add(layer(f, entry{name: "a/b", typ: tar.TypeReg, body: "x"}, entry{name: "l", typ: tar.TypeSymlink, link: "../../x"}))
	f.Add(layer(f, entry{name: "l", typ: tar.TypeSymlink, link: "/"}, entry{name: "l/x", typ: tar.TypeReg, body: "x"}))
	f.Add(layer(f, entry{name: ".wh..wh..opq", typ: tar.TypeReg}, entry{name: "h", typ: tar.TypeLink, link: "a/b"}))
	f.Add(layer(f, entry{name: "h", typ: tar.TypeLink, link: "base", mode: 0o777}))
	f.Add(layer(f, entry{name: SeedDir + "/h", typ: tar.TypeLink, link: "base", mode: 0o777}))
	f.Add(layer(f, entry{name: SeedDir + "/l", typ: tar.TypeSymlink, link: "../"}, entry{name: SeedDir + "/l/base", typ: tar.TypeReg, body: "x"}))
	f.Add(layer(f, entry{name: SeedDir + "/", typ: tar.TypeDir}, entry{name: SeedDir + "/a", typ: tar.TypeReg, body: "a"}, entry{name: SeedDir + "/b", typ: tar.TypeLink, link: SeedDir + "/a"}))
	f.Add(layer(f, entry{name: SeedDir + "/.wh..wh..opq", typ: tar.TypeReg}, entry{name: ".wh.base", typ: tar.TypeReg}))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, seed := range []bool{false, true} {
			r, rootfs, outside := rootfsIn(t)
			// base is a base's file, shared with the rootfs's copy.
			shared := filepath.Join(outside, "shared")
			os.WriteFile(shared, []byte("base"), 0o644)
			os.Link(shared, filepath.Join(rootfs, "base"))
			apply := ApplyLayer
			if seed {
				apply = ApplySeedLayer
			}
			apply(r, bytes.NewReader(b), Limits{Bytes: 1 << 20, Entries: 1000}, &Unpacked{})
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Fatalf("written outside: %v", ents)
			}
			st, err := os.Stat(shared)
			if err != nil || st.Mode() != 0o644 || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
				t.Fatalf("the base's file changed: %v %v", st.Mode(), err)
			}
			if b, _ := os.ReadFile(shared); string(b) != "base" {
				t.Fatalf("the base's file now holds %q", b)
			}
			if !seed {
				continue
			}
			ents, _ := os.ReadDir(rootfs)
			for _, e := range ents {
				if e.Name() != SeedDir && e.Name() != "base" {
					t.Fatalf("a seed layer wrote %s", e.Name())
				}
			}
			if st, err := os.Lstat(filepath.Join(rootfs, "base")); err != nil || !os.SameFile(st, mustStat(t, shared)) {
				t.Fatalf("a seed layer replaced base: %v", err)
			}
		}
	})
}

func mustStat(t *testing.T, p string) os.FileInfo {
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
