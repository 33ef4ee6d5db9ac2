package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	ggremote "github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// fileLayer is a layer of regular files, path → content.
func fileLayer(t *testing.T, files ...string) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for i := 0; i < len(files); i += 2 {
		if err := w.WriteHeader(&tar.Header{Name: files[i], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[i+1]))}); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[i+1]))
	}
	w.Close()
	raw := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is a linux/amd64 image of layers.
func testImage(t *testing.T, layers ...v1.Layer) (v1.Image, string) {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return img, d.String()
}

// imageVerb runs `sandbox image ARGS --data data --images images` in
// process, with in as its stdin.
func imageVerb(t *testing.T, data, images, in string, args ...string) (string, string, error) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(in)
	defer func() { stdin = old }()
	var out, errb bytes.Buffer
	err := run(context.Background(), append(append([]string{"image"}, args...), "--data", data, "--images", images), &out, &errb)
	return out.String(), errb.String(), err
}

func rootfsFile(t *testing.T, images, digest, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(images, "oci", strings.TrimPrefix(digest, "sha256:"), "rootfs", path))
	if err != nil {
		t.Fatalf("%s of %s: %v", path, digest, err)
	}
	return string(b)
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// TestImageVerbs: pull from a real registry, import an OCI layout and a
// docker-save archive, list, rm and gc, each through the real verb.
func TestImageVerbs(t *testing.T) {
	reg := testenv.NeedRegistry(t, false)
	data, images := t.TempDir(), t.TempDir()
	oci := func(digest string) string { return filepath.Join(images, "oci", strings.TrimPrefix(digest, "sha256:")) }

	imgA, digestA := testImage(t, fileLayer(t, "etc/tool", "one\n"), fileLayer(t, "etc/tool", "two\n", "bin/x", "x"))
	refA := reg.Push(t, "team/tool:1", imgA)

	out, errs, err := imageVerb(t, data, images, "", "pull", "tool", refA)
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, errs)
	}
	if out != digestA+"\n" {
		t.Errorf("pull printed %q, want the digest %s alone", out, digestA)
	}
	if !strings.Contains(errs, "layer 1/2  ") || !strings.Contains(errs, "layer 2/2  ") || !strings.Contains(errs, "every org's image") {
		t.Errorf("pull's progress: %q", errs)
	}
	if got := rootfsFile(t, images, digestA, "etc/tool"); got != "two\n" {
		t.Errorf("the upper layer's file reads %q", got)
	}
	p, err := image.InspectPulled(images, digestA)
	if err != nil || p.Source != refA || p.Layers != 2 {
		t.Fatalf("pulled.json: %+v %v", p, err)
	}

	// The same digest for an org: named, not unpacked again.
	if out, errs, err := imageVerb(t, data, images, "", "pull", "--org", "acme", "mine", refA); err != nil || out != digestA+"\n" {
		t.Fatalf("pull --org: %v %q %s", err, out, errs)
	}
	if out, errs, _ := imageVerb(t, data, images, "", "pull", "--org", "acme", "mine", refA); !strings.Contains(errs, "unpacked already") || strings.Contains(errs, "layer ") {
		t.Errorf("a pull of a digest already here: %q %q", out, errs)
	}
	if q, _ := image.InspectPulled(images, digestA); !q.PulledAt.Equal(p.PulledAt) {
		t.Error("a second pull of a digest unpacked it again")
	}

	// An OCI layout directory, for the org.
	imgB, digestB := testImage(t, fileLayer(t, "b.txt", "from a layout\n"))
	lay, err := layout.Write(filepath.Join(t.TempDir(), "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lay.AppendImage(imgB); err != nil {
		t.Fatal(err)
	}
	if out, errs, err := imageVerb(t, data, images, "", "import", "laid", string(lay), "--org", "acme"); err != nil || out != digestB+"\n" {
		t.Fatalf("import of a layout: %v %q %s", err, out, errs)
	}
	if got := rootfsFile(t, images, digestB, "b.txt"); got != "from a layout\n" {
		t.Errorf("b.txt reads %q", got)
	}

	// A docker save archive, for the server.
	imgC, digestC := testImage(t, fileLayer(t, "c.txt", "from docker save\n"))
	archive := filepath.Join(t.TempDir(), "c.tar")
	tag, _ := name.NewTag("example.com/c:latest")
	if err := tarball.WriteToFile(archive, tag, imgC); err != nil {
		t.Fatal(err)
	}
	if out, errs, err := imageVerb(t, data, images, "", "import", "saved", archive); err != nil || out != digestC+"\n" {
		t.Fatalf("import of a docker save archive: %v %q %s", err, out, errs)
	}
	if got := rootfsFile(t, images, digestC, "c.txt"); got != "from docker save\n" {
		t.Errorf("c.txt reads %q", got)
	}
	if _, _, err := imageVerb(t, data, images, "", "import", "junk", filepath.Join(t.TempDir(), "missing.tar")); err == nil {
		t.Error("an import of a missing file succeeded")
	}

	// list: the server's everywhere, the org's only with --org.
	out, _, err = imageVerb(t, data, images, "", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "exec ") || !strings.Contains(out, "tool") || !strings.Contains(out, "saved") || strings.Contains(out, "mine") || strings.Contains(out, "laid") {
		t.Errorf("list:\n%s", out)
	}
	out, _, err = imageVerb(t, data, images, "", "list", "--org", "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mine", "laid", "tool", "saved", shortDigest(digestA), shortDigest(digestB), refA, archive, "org acme", "server"} {
		if !strings.Contains(out, want) {
			t.Errorf("list --org acme lacks %q:\n%s", want, out)
		}
	}

	// rm: the server's without --org, the org's with it.
	if _, _, err := imageVerb(t, data, images, "", "rm", "mine"); err == nil || !strings.Contains(err.Error(), "--org") {
		t.Errorf("rm of an org's name without --org: %v", err)
	}
	if out, _, err := imageVerb(t, data, images, "", "rm", "mine", "--org", "acme"); err != nil || !strings.Contains(out, "removed mine") {
		t.Errorf("rm --org: %v %q", err, out)
	}
	if _, _, err := imageVerb(t, data, images, "", "rm", "saved"); err != nil {
		t.Errorf("rm: %v", err)
	}
	if _, _, err := imageVerb(t, data, images, "", "rm", "saved"); err == nil || !strings.Contains(err.Error(), "no image") {
		t.Errorf("a second rm: %v", err)
	}

	// What crashed pulls and removals leave.
	half := filepath.Join(images, "oci", strings.Repeat("ab", 32))
	staging := filepath.Join(images, "oci", ".pull-0123")
	for _, d := range []string{filepath.Join(half, "rootfs"), filepath.Join(staging, "rootfs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A staging directory of a pull in flight (fresh) is not a crashed
	// one's (older than image.StagingGrace).
	inflight := filepath.Join(images, "oci", ".pull-4567")
	os.MkdirAll(inflight, 0o755)
	old := time.Now().Add(-2 * image.StagingGrace)
	os.Chtimes(staging, old, old)

	// gc --older-than spares the fresh, unnamed C; gc takes it.
	if out, _, err := imageVerb(t, data, images, "", "gc", "--older-than", "1h"); err != nil || strings.Contains(out, shortDigest(digestC)) || !exists(oci(digestC)) {
		t.Errorf("gc --older-than 1h took a fresh image: %v %q", err, out)
	}
	out, _, err = imageVerb(t, data, images, "", "gc")
	if err != nil {
		t.Fatalf("gc: %v", err)
	}
	if exists(oci(digestC)) || !strings.Contains(out, "removed "+shortDigest(digestC)) || !strings.Contains(out, "freed ") {
		t.Errorf("gc kept the unnamed image: %q", out)
	}
	if !exists(oci(digestA)) || !exists(oci(digestB)) {
		t.Errorf("gc took a named image: %q", out)
	}
	if exists(half) || exists(staging) {
		t.Errorf("gc kept a half-pulled image or a staging directory: %q", out)
	}
	if !exists(inflight) {
		t.Error("gc took the staging directory of a pull in flight")
	}
	// A sandbox's row holds its image: rm is refused while it lives, and
	// gc keeps the files while the row is there.
	imgD, digestD := testImage(t, fileLayer(t, "d.txt", "run by a sandbox\n"))
	dlay, err := layout.Write(filepath.Join(t.TempDir(), "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := dlay.AppendImage(imgD); err != nil {
		t.Fatal(err)
	}
	if _, errs, err := imageVerb(t, data, images, "", "import", "run", string(dlay), "--org", "beta"); err != nil {
		t.Fatalf("import: %v %s", err, errs)
	}
	st, err := store.Open(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	bctx := sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: "beta", Subject: "test"})
	now := time.Now()
	sb := &sandbox.Sandbox{ID: "sb_imagegc", Class: "exec", Status: sandbox.StatusPending, Image: digestD, Runtime: "gvisor", Workdir: "/work",
		CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.Insert(bctx, sb, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := imageVerb(t, data, images, "", "rm", "run", "--org", "beta"); err == nil || !strings.Contains(err.Error(), "sb_imagegc") {
		t.Errorf("rm of an image a live sandbox runs: %v", err)
	}
	if err := st.Transition(bctx, sb.ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusError, Error: "test"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, _, err := imageVerb(t, data, images, "", "rm", "run", "--org", "beta"); err != nil {
		t.Errorf("rm once the sandbox is not live: %v", err)
	}
	if out, _, err := imageVerb(t, data, images, "", "gc"); err != nil || !exists(oci(digestD)) {
		t.Errorf("gc took the image of a sandbox's row: %v %q", err, out)
	}

	// With the last name of A gone, A goes too.
	if _, _, err := imageVerb(t, data, images, "", "rm", "tool"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := imageVerb(t, data, images, "", "gc"); err != nil || exists(oci(digestA)) || !exists(oci(digestB)) {
		t.Errorf("gc after the last name went: %v %q", err, out)
	}
}

// TestImagePullAuth: a registry with basic auth wants --username and
// --password-stdin, refuses a wrong password, and the password never
// shows.
func TestImagePullAuth(t *testing.T) {
	reg := testenv.NeedRegistry(t, true)
	data, images := t.TempDir(), t.TempDir()
	img, digest := testImage(t, fileLayer(t, "secret.txt", "private\n"))
	ref := reg.Push(t, "private/tool:2", img)

	if _, _, err := imageVerb(t, data, images, "", "pull", "p", ref); err == nil || !strings.Contains(err.Error(), "--password-stdin") {
		t.Errorf("an anonymous pull of a private image: %v", err)
	}
	out, errs, err := imageVerb(t, data, images, "wrong\n", "pull", "p", ref, "--username", reg.User, "--password-stdin")
	if err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Errorf("a wrong password: %v %q %q", err, out, errs)
	}
	out, errs, err = imageVerb(t, data, images, reg.Password+"\n", "pull", "p", ref, "--username", reg.User, "--password-stdin", "--org", "acme")
	if err != nil || out != digest+"\n" {
		t.Fatalf("pull with credentials: %v %q %s", err, out, errs)
	}
	if strings.Contains(out+errs, reg.Password) {
		t.Errorf("the password showed: %q %q", out, errs)
	}
	if got := rootfsFile(t, images, digest, "secret.txt"); got != "private\n" {
		t.Errorf("secret.txt reads %q", got)
	}
	// Never stored: nothing under the data or images directory holds it.
	for _, dir := range []string{data, images} {
		filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() {
				if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(reg.Password)) {
					t.Errorf("%s holds the password", path)
				}
			}
			return nil
		})
	}
	if _, _, err := imageVerb(t, data, images, "", "pull", "p", reg.Host+"/private/none:1", "--username", reg.User, "--password-stdin"); err == nil || !strings.Contains(err.Error(), "empty password") {
		t.Errorf("an empty stdin: %v", err)
	}
	if _, _, err := imageVerb(t, data, images, reg.Password+"\n", "pull", "p", reg.Host+"/private/none:1", "--username", reg.User, "--password-stdin"); err == nil || !strings.Contains(err.Error(), "has no") {
		t.Errorf("a missing repository: %v", err)
	}
}

// TestImagePush: import --push puts the image in a registry the cluster
// pulls from and records it there by digest, unpacking nothing here.
func TestImagePush(t *testing.T) {
	reg := testenv.NeedRegistry(t, false)
	data, images := t.TempDir(), t.TempDir()
	img, digest := testImage(t, fileLayer(t, "etc/tool", "pushed\n"))
	file := filepath.Join(t.TempDir(), "img.tar")
	ref, _ := name.ParseReference("example.invalid/tool:1")
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		t.Fatal(err)
	}
	out, errs, err := imageVerb(t, data, images, "", "import", "--push", reg.Host+"/cluster", "tool", file)
	if err != nil || out != digest+"\n" {
		t.Fatalf("import --push: %v %q %s", err, out, errs)
	}
	p, err := image.InspectPulled(images, digest)
	if err != nil || p.Pinned != reg.Host+"/cluster@"+digest {
		t.Fatalf("the record: %+v %v", p, err)
	}
	if exists(filepath.Join(images, "oci", strings.TrimPrefix(digest, "sha256:"), "rootfs")) {
		t.Error("a pushed image was unpacked here")
	}
	r, _ := name.ParseReference(reg.Host + "/cluster:tool")
	got, err := ggremote.Image(r)
	if err != nil {
		t.Fatalf("the registry has no pushed image: %v", err)
	}
	if d, _ := got.Digest(); d.String() != digest {
		t.Errorf("pushed %s, want %s", d, digest)
	}
}
