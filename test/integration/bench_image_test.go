package integration_test

import (
	"archive/tar"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
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
// and recorded — beside the floor, the registry's raw download of the
// same blobs. Both report MB/s of layer bytes.
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
	b.Run("raw-download", func(b *testing.B) {
		r, _ := name.ParseReference(ref)
		img, err := remote.Image(r)
		if err != nil {
			b.Fatal(err)
		}
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			ls, _ := img.Layers()
			for _, l := range ls {
				dg, _ := l.Digest()
				fresh, err := remote.Layer(r.Context().Digest(dg.String()))
				if err != nil {
					b.Fatal(err)
				}
				rc, err := fresh.Compressed()
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, rc)
				rc.Close()
			}
			d = append(d, time.Since(start))
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
