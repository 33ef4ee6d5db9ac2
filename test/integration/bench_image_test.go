package integration_test

import (
	"archive/tar"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// BenchmarkImagePull: POST /v1/images of a 4-layer image of 100 MB
// (incompressible) from the loopback registry — fetched, checked, unpacked
// and recorded — beside its floors: raw-download (the registry's blobs
// read and dropped) and floor (each fetched, its digest checked,
// gunzipped and written once). All report MB/s of layer bytes.
func BenchmarkImagePull(b *testing.B) {
	reg := testenv.NeedRegistry(b, false)
	images := imagesWithClasses(b)
	cfg := server.Config{Images: images}
	cfg.Catalog.Allow = []string{reg.Host}
	e := newEnvConfig(b, cfg)
	var layers []tarEntry
	for i := range 4 {
		blob := make([]byte, 25<<20)
		rand.Read(blob)
		layers = append(layers, tarEntry{name: fmt.Sprintf("data/%d.bin", i), typ: tar.TypeReg, body: blob})
	}
	ref := push(b, reg, "bench/big:1", nil, busyboxLayer(b), tarLayer(b, layers[0]), tarLayer(b, layers[1]), tarLayer(b, layers[2]), tarLayer(b, layers[3]))
	const total = 100 << 20
	mbps := func(b *testing.B, d []time.Duration) {
		p50 := testenv.P50(d)
		b.ReportMetric(float64(total)/(1<<20)/p50.Seconds(), "MB/s")
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("pull", func(b *testing.B) {
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			r := e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "big", "ref": ref})
			d = append(d, time.Since(start))
			b.StopTimer()
			digest, _ := r.JSON(b)["digest"].(string)
			e.must(http.StatusOK, "DELETE", "/v1/images/big", "acme", nil)
			if err := image.RemovePulled(images, digest); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		mbps(b, d)
	})
	// The floors: each layer fetched afresh from the registry by its
	// digest. "raw-download" is the network alone (the compressed bytes
	// read and dropped); "floor" is the least a pull can do with them —
	// the download, its digest checked (go-containerregistry's verifying
	// reader fails at EOF on a mismatch), gunzip, and the layer's bytes
	// written once to a file in the server's data directory. The pull does
	// that and more: it unpacks each tar entry into its own file under a
	// root it cannot leave, with the bounds, whiteouts and accounting.
	r, err := name.ParseReference(ref)
	if err != nil {
		b.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		b.Fatal(err)
	}
	digests := func(b *testing.B) []string {
		ls, err := img.Layers()
		if err != nil {
			b.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			dg, err := l.Digest()
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, dg.String())
		}
		return out
	}
	fetch := func(b *testing.B, dg string, uncompressed bool) io.ReadCloser {
		fresh, err := remote.Layer(r.Context().Digest(dg))
		if err != nil {
			b.Fatal(err)
		}
		var rc io.ReadCloser
		if uncompressed {
			rc, err = fresh.Uncompressed()
		} else {
			rc, err = fresh.Compressed()
		}
		if err != nil {
			b.Fatal(err)
		}
		return rc
	}
	b.Run("raw-download", func(b *testing.B) {
		ls := digests(b)
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			for _, dg := range ls {
				rc := fetch(b, dg, false)
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				if err := rc.Close(); err != nil {
					b.Fatal(err)
				}
			}
			d = append(d, time.Since(start))
		}
		mbps(b, d)
	})
	b.Run("floor", func(b *testing.B) {
		ls := digests(b)
		out := filepath.Join(e.data, "floor-layer")
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			for _, dg := range ls {
				rc := fetch(b, dg, true)
				f, err := os.Create(out)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(f, rc); err != nil {
					b.Fatal(err)
				}
				if err := errors.Join(rc.Close(), f.Close()); err != nil {
					b.Fatal(err)
				}
			}
			d = append(d, time.Since(start))
			os.Remove(out)
		}
		mbps(b, d)
	})
}

// BenchmarkLeaseImage: a lease on a pulled image beside a lease of the
// built-in exec image, same run (target: ≤ 1.1×).
func BenchmarkLeaseImage(b *testing.B) {
	reg := testenv.NeedRegistry(b, false)
	images := imagesWithClasses(b)
	cfg := server.Config{Images: images}
	cfg.Catalog.Allow = []string{reg.Host}
	e := newEnvConfig(b, cfg)
	ref := push(b, reg, "bench/tool:1", []string{"PATH=/bin"}, busyboxLayer(b))
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "tool", "ref": ref})
	b.Run("pulled", func(b *testing.B) {
		measure(b, nil, func() func() { return e.leaseTimed(map[string]any{"image": "tool"}) })
	})
	b.Run("exec", func(b *testing.B) { measure(b, nil, func() func() { return e.leaseTimed(nil) }) })
}

// BenchmarkSnapshot: POST /snapshot of an exec sandbox holding 200 MB of
// changes in its root (the base, 2.2 GB, copied as hardlinks).
func BenchmarkSnapshot(b *testing.B) {
	images := imagesWithClasses(b)
	e := newEnvConfig(b, server.Config{Images: images})
	id := e.lease("acme", nil)
	e.sh("acme", id, "mkdir -p ~/.local/lib && head -c 200000000 /dev/urandom > ~/.local/lib/blob")
	measure(b, nil, func() func() {
		r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": "snap"})
		digest, _ := r.JSON(b)["digest"].(string)
		return func() {
			e.must(http.StatusOK, "DELETE", "/v1/images/snap", "acme", nil)
			image.RemovePulled(images, digest)
			if left, _ := filepath.Glob(filepath.Join(images, "oci", "*")); len(left) != 0 && !strings.Contains(left[0], ".pull-") {
				b.Fatalf("left: %v", left)
			}
		}
	})
}
