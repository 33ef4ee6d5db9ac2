package testenv

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"sort"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// MaybeRegistry is NeedRegistry where docker-registry is installed or
// SANDBOX_TEST_REQUIRE names the registry, else nil: for a suite whose
// image part is one test among many that should not all skip.
func MaybeRegistry(t testing.TB, auth bool) *Registry {
	t.Helper()
	if _, err := exec.LookPath("docker-registry"); err != nil && !Required(RegistryPart) {
		t.Logf("no docker-registry: the image pulls of this suite are skipped")
		return nil
	}
	return NeedRegistry(t, auth)
}

// PushBusybox pushes a tiny linux/amd64 image to the registry as repo
// (e.g. "team/tool:1") and returns its reference: the host's static
// busybox as /bin/sh with a few applets, and files (path → content, a
// layer of their own) on top.
func (r *Registry) PushBusybox(t testing.TB, repo string, files map[string]string) string {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		Missing(t, RegistryPart, "/bin/busybox (Debian's busybox-static; scripts/deps.sh installs it for the tests)")
	}
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	add := func(h *tar.Header, body []byte) {
		h.Uid, h.Gid, h.Size = 1000, 1000, int64(len(body))
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		w.Write(body)
	}
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, bb)
	add(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil)
	for _, applet := range []string{"sh", "ls", "cat", "echo", "id", "env", "sleep"} {
		add(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	w.Close()
	layers := []v1.Layer{layerOf(t, b.Bytes())}
	if len(files) > 0 {
		var f bytes.Buffer
		w := tar.NewWriter(&f)
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			if err := w.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[p]))}); err != nil {
				t.Fatal(err)
			}
			w.Write([]byte(files[p]))
		}
		w.Close()
		layers = append(layers, layerOf(t, f.Bytes()))
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Config.Env = "linux", "amd64", []string{"PATH=/bin"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return r.Push(t, repo, img)
}

// Push writes img to the registry as repo, with the registry's
// credentials if it has any, and returns its reference.
func (r *Registry) Push(t testing.TB, repo string, img v1.Image) string {
	t.Helper()
	ref := r.Host + "/" + repo
	parsed, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.Anonymous
	if r.User != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password})
	}
	if err := remote.Write(parsed, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

func layerOf(t testing.TB, raw []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}
