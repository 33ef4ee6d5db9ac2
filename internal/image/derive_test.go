package image

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// deriveBase makes a base rootfs (an image's, to derive from) in dir: a
// tool owned by root, mode 0755, some directories and an /etc/passwd.
func deriveBase(t *testing.T) (images, base string) {
	t.Helper()
	dir := t.TempDir()
	images, base = filepath.Join(dir, "images"), filepath.Join(dir, "base")
	for _, d := range []string{images, base + "/usr/bin", base + "/etc", base + "/var/lib"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(base+"/usr/bin/tool", []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(base+"/etc/passwd", []byte("root:x:0:0::/root:/bin/sh\n"), 0o644)
	return images, base
}

// layerFiles writes each layer to a file, as the server's library does.
func layerFiles(t *testing.T, layers ...[]byte) []string {
	t.Helper()
	var out []string
	for i, l := range layers {
		p := filepath.Join(t.TempDir(), "layer-"+strconv.Itoa(i)+".tar")
		if err := os.WriteFile(p, l, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func statOf(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t)
}

// TestDeriveHardlinkCopyUp: a snapshot's hard link to a base's file, with
// an owner and a mode of its own, leaves the base's inode as it was (the
// derived image's copy shares it until the link copies it up).
func TestDeriveHardlinkCopyUp(t *testing.T) {
	images, base := deriveBase(t)
	before := statOf(t, base+"/usr/bin/tool")
	b := layer(t, entry{name: "home/x/alias", typ: tar.TypeLink, link: "usr/bin/tool", mode: 0o777})
	p, err := Derive(context.Background(), images, "base", base, nil, layerFiles(t, b), "test", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	after := statOf(t, base+"/usr/bin/tool")
	if after.Mode != before.Mode || after.Uid != before.Uid || after.Gid != before.Gid || after.Nlink != before.Nlink {
		t.Errorf("the base's tool: mode %o uid %d nlink %d, was mode %o uid %d nlink %d",
			after.Mode, after.Uid, after.Nlink, before.Mode, before.Uid, before.Nlink)
	}
	rootfs, err := PulledRootfs(images, p.Digest)
	if err != nil {
		t.Fatal(err)
	}
	tool, alias := statOf(t, rootfs+"/usr/bin/tool"), statOf(t, rootfs+"/home/x/alias")
	if tool.Ino == before.Ino || alias.Ino != tool.Ino {
		t.Errorf("inodes: base %d, image's tool %d, alias %d: want the tool copied up and the alias its link", before.Ino, tool.Ino, alias.Ino)
	}
	if tool.Mode&0o7777 != 0o777 || tool.Uid != 1000 {
		t.Errorf("the image's tool: mode %o uid %d, want the link's 777 and 1000", tool.Mode&0o7777, tool.Uid)
	}
	if b, _ := os.ReadFile(rootfs + "/home/x/alias"); string(b) != "#!/bin/sh\n" {
		t.Errorf("the copy: %q", b)
	}
	// A file the layers wrote themselves is linked as it is.
	b2 := layer(t, entry{name: "a", typ: tar.TypeReg, body: "a"}, entry{name: "b", typ: tar.TypeLink, link: "a"})
	p, err = Derive(context.Background(), images, "base", base, nil, layerFiles(t, b2), "test", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	rootfs, _ = PulledRootfs(images, p.Digest)
	if statOf(t, rootfs+"/a").Nlink != 2 {
		t.Errorf("a file of the layer was copied for its link")
	}
}

// TestDeriveSeedConfined: the layers of a saved workdir (the second and
// later) write only under SeedDir, whatever their names, links and hard
// links say, and whatever the first layer made SeedDir.
func TestDeriveSeedConfined(t *testing.T) {
	images, base := deriveBase(t)
	empty := layer(t)
	for name, layers := range map[string][][]byte{
		"a name outside": {empty, layer(t, entry{name: "etc/passwd", typ: tar.TypeReg, body: "evil"})},
		"cleaned out":    {empty, layer(t, entry{name: SeedDir + "/../etc/passwd", typ: tar.TypeReg, body: "evil"})},
		"through a link": {empty, layer(t,
			entry{name: SeedDir + "/l", typ: tar.TypeSymlink, link: "../etc"},
			entry{name: SeedDir + "/l/passwd", typ: tar.TypeReg, body: "evil"})},
		"a hard link out": {empty, layer(t, entry{name: SeedDir + "/h", typ: tar.TypeLink, link: "etc/passwd", mode: 0o666})},
		"whiteout out":    {empty, layer(t, entry{name: ".wh.etc", typ: tar.TypeReg})},
		"seed made a link": {layer(t, entry{name: SeedDir, typ: tar.TypeSymlink, link: "etc"}),
			layer(t, entry{name: SeedDir + "/passwd", typ: tar.TypeReg, body: "evil"})},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Derive(context.Background(), images, "base", base, nil, layerFiles(t, layers...), "test", Limits{})
			if b, _ := os.ReadFile(base + "/etc/passwd"); string(b) != "root:x:0:0::/root:/bin/sh\n" {
				t.Fatalf("the base's passwd: %q", b)
			}
			if st := statOf(t, base+"/etc/passwd"); st.Mode&0o777 != 0o644 {
				t.Fatalf("the base's passwd: mode %o", st.Mode&0o777)
			}
			if err != nil {
				return // refused: fine
			}
			rootfs, _ := PulledRootfs(images, p.Digest)
			if b, _ := os.ReadFile(rootfs + "/etc/passwd"); string(b) != "root:x:0:0::/root:/bin/sh\n" {
				t.Errorf("the image's passwd: %q", b)
			}
			if st, err := os.Lstat(rootfs + "/etc"); err != nil || !st.IsDir() {
				t.Errorf("the image's etc: %v", err)
			}
		})
	}
	// A workdir layer under SeedDir is applied there.
	p, err := Derive(context.Background(), images, "base", base, nil, layerFiles(t, empty,
		layer(t, entry{name: SeedDir + "/", typ: tar.TypeDir, mode: 0o755}, entry{name: SeedDir + "/notes", typ: tar.TypeReg, body: "n"},
			entry{name: SeedDir + "/up", typ: tar.TypeSymlink, link: "../etc"})), "test", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	rootfs, _ := PulledRootfs(images, p.Digest)
	if b, _ := os.ReadFile(rootfs + "/" + SeedDir + "/notes"); string(b) != "n" {
		t.Errorf("the seed: %q", b)
	}
}

// TestDeriveCost: an image costs its entries as well as its bytes, and a
// derived one its copy of the base: 2,000 empty directories are charged
// 2,000 blocks, and refused under a smaller limit before they are made.
func TestDeriveCost(t *testing.T) {
	images, base := deriveBase(t)
	var entries []entry
	for i := range 2000 {
		entries = append(entries, entry{name: "many/" + strconv.Itoa(i) + "/", typ: tar.TypeDir, mode: 0o755})
	}
	l := layerFiles(t, layer(t, entries...))
	// The base: 6 directories (with its top) and 2 files, linked.
	copyCost := int64(6*EntryCost + 2*LinkCost)
	p, err := Derive(context.Background(), images, "base", base, nil, l, "test", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := copyCost + 2001*EntryCost; p.SizeBytes != want {
		t.Errorf("the image's size: %d, want %d (the copy's %d, 2,000 entries and their parent)", p.SizeBytes, want, copyCost)
	}
	if q, err := InspectPulled(images, p.Digest); err != nil || q.SizeBytes != p.SizeBytes {
		t.Errorf("its record: %+v %v", q, err)
	}
	os.RemoveAll(filepath.Join(images, ociDir))
	_, err = Derive(context.Background(), images, "base", base, nil, l, "test", Limits{Bytes: 1000 * EntryCost})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("2,000 directories under a limit of 1,000 blocks: %v", err)
	}
	_, err = Derive(context.Background(), images, "base", base, nil, l, "test", Limits{Bytes: copyCost - 1})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a base copy over the limit: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(images, ociDir, "*")); len(left) != 0 {
		t.Errorf("left in the images directory: %v", left)
	}
}

// TestApplyLayerEntryCost: a pull is charged per entry too.
func TestApplyLayerEntryCost(t *testing.T) {
	r, _, _ := rootfsIn(t)
	var u Unpacked
	if err := apply(t, r, Limits{}, &u, layer(t, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/f", typ: tar.TypeReg, body: "12345"})); err != nil {
		t.Fatal(err)
	}
	if u.Cost != 2*EntryCost+5 || u.Bytes != 5 {
		t.Errorf("cost %d bytes %d, want %d and 5", u.Cost, u.Bytes, 2*EntryCost+5)
	}
	// One entry of a deep name is as many directories.
	u = Unpacked{}
	if err := apply(t, r, Limits{}, &u, layer(t, entry{name: "x/" + strings.Repeat("d/", 99) + "f", typ: tar.TypeReg})); err != nil {
		t.Fatal(err)
	}
	if u.Cost != 101*EntryCost || u.Entries != 101 {
		t.Errorf("a file 100 directories deep: cost %d, %d entries; want %d, 101", u.Cost, u.Entries, 101*EntryCost)
	}
	var entries []entry
	for i := range 100 {
		entries = append(entries, entry{name: strconv.Itoa(i), typ: tar.TypeReg})
	}
	r, _, _ = rootfsIn(t)
	if err := apply(t, r, Limits{Bytes: 50 * EntryCost}, &Unpacked{}, layer(t, entries...)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("100 empty files under a limit of 50 blocks: %v", err)
	}
}
