package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"log/slog"
	"path/filepath"

	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// Backends.
const (
	BackendGVisor = "gvisor"
	BackendKube   = "kube"
)

// backend is a runtime and what differs with it: where the images live,
// whether the interpreter's runner is mounted, what must settle before
// recovery.
type backend struct {
	rt runtime.Runtime
	// settle waits for work a killed server left running; nil if none.
	settle func(context.Context) error
	// imageReady says whether an image can run here; nil means any can
	// (the cluster's nodes hold them, and a missing one fails the pod with
	// the cluster's reason).
	imageReady func(name string) error
	// runner is the runner's path inside a sandbox; "" runs interpreter
	// programs through the shell script.
	runner string
	// library keeps pulled images; nil where the backend runs none.
	library *library
}

// library is the pulled images of an images directory (internal/image),
// as the service reaches them.
type library struct{ dir string }

func (l *library) Pull(ctx context.Context, ref string, auth *image.Auth, lim image.Limits) (*image.Pulled, error) {
	img, err := image.Remote(ctx, ref, auth)
	if err != nil {
		return nil, err
	}
	return image.Unpack(ctx, l.dir, img, ref, lim, nil)
}

func (l *library) Rootfs(digest string) (string, error) { return image.PulledRootfs(l.dir, digest) }

// Seeded says whether a pulled image carries a saved workdir.
func (l *library) Seeded(name string) bool {
	root, err := l.rootfs(name)
	if err != nil {
		return false
	}
	st, err := os.Lstat(filepath.Join(root, service.SeedDir))
	return err == nil && st.IsDir()
}

// Derive writes each layer to a file beside the images (never to a
// tmpfs /tmp: a snapshot may be large), then derives the image from base.
func (l *library) Derive(ctx context.Context, base, source string, lim image.Limits, layers ...func(io.Writer) error) (*image.Pulled, error) {
	baseRootfs, err := l.rootfs(base)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(l.dir), ".snapshot-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var files []string
	for i, write := range layers {
		f, err := os.Create(filepath.Join(tmp, fmt.Sprintf("layer-%d.tar", i)))
		if err != nil {
			return nil, err
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		files = append(files, f.Name())
	}
	return image.Derive(ctx, l.dir, base, baseRootfs, l.env(base), files, source, lim)
}

// lib is the service's view of b.library: a nil interface when there is
// none (never a typed nil).
func (b backend) lib() service.Library {
	if b.library == nil {
		return nil
	}
	return b.library
}

// rootfs is the rootfs of a class image or of a pulled one (by digest).
func (l *library) rootfs(name string) (string, error) {
	if image.IsDigest(name) {
		return image.PulledRootfs(l.dir, name)
	}
	return image.Rootfs(l.dir, name)
}

// env is what a pulled image's config asks for; a class image asks none.
func (l *library) env(name string) []string {
	if !image.IsDigest(name) {
		return nil
	}
	p, err := image.InspectPulled(l.dir, name)
	if err != nil {
		return nil
	}
	return p.Env
}

// localImage is the image check of the gvisor backend: built in
// cfg.Images, and for an image this tool cannot build, a lease refused at
// once naming what is missing (never a hung sandbox).
func localImage(dir string) func(string) error {
	return func(name string) error {
		if image.IsDigest(name) {
			_, err := image.PulledRootfs(dir, name)
			return err
		}
		_, err := image.Rootfs(dir, name)
		if r, rerr := image.RecipeFor(name); err != nil && rerr == nil && !r.Buildable {
			return sandbox.Errorf(sandbox.KindInvalid, "class %s cannot run on this server: %s", name, r.Missing)
		}
		return err
	}
}

// newBackend builds the backend of cfg.Backend.
func newBackend(ctx context.Context, cfg Config, log *slog.Logger) (backend, error) {
	switch cfg.Backend {
	case "", BackendGVisor:
		lib := &library{dir: cfg.Images}
		image.SweepStaging(cfg.Images)
		rt, err := gvisor.New(gvisor.Config{
			Options:     cfg.GVisor,
			StateDir:    filepath.Join(cfg.Data, "runtime"),
			ImageRootfs: lib.rootfs,
			ImageEnv:    lib.env,
			Runner:      cfg.Runner,
		})
		if err != nil {
			return backend{}, err
		}
		b := backend{rt: rt, settle: rt.Settle, imageReady: localImage(cfg.Images), library: lib}
		if cfg.Runner != "" {
			b.runner = runtime.RunnerPath
		}
		return b, nil
	case BackendKube:
		rt, err := kube.Open(ctx, cfg.Kube, log)
		if err != nil {
			return backend{}, err
		}
		return backend{rt: rt}, nil
	}
	return backend{}, fmt.Errorf("unknown backend %q: gvisor or kube", cfg.Backend)
}
