package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
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
}

// localImage is the image check of the gvisor backend: built in
// cfg.Images, and for an image this tool cannot build, a lease refused at
// once naming what is missing (never a hung sandbox).
func localImage(dir string) func(string) error {
	return func(name string) error {
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
		rt, err := gvisor.New(gvisor.Config{
			Options:     cfg.GVisor,
			StateDir:    filepath.Join(cfg.Data, "runtime"),
			ImageRootfs: func(name string) (string, error) { return image.Rootfs(cfg.Images, name) },
			Runner:      cfg.Runner,
		})
		if err != nil {
			return backend{}, err
		}
		b := backend{rt: rt, settle: rt.Settle, imageReady: localImage(cfg.Images)}
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
