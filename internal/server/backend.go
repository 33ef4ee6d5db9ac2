package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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

// KubeConfig configures the kube backend.
type KubeConfig struct {
	// Kubeconfig is a kubeconfig file; empty means the in-cluster config
	// (the server running as a pod).
	Kubeconfig string
	// Namespace of the sandbox pods (required; never a system namespace).
	Namespace string
	// ServerNamespace is the server's own namespace, which the sandboxes
	// must not share; empty means unknown.
	ServerNamespace string
	// RuntimeClass is the RuntimeClass of the default runtime (gvisor);
	// empty runs pods without one.
	RuntimeClass string
	// ServiceAccount the pods run as; empty means "sandbox-pod".
	ServiceAccount string
	// StorageClass of project volumes; empty means the cluster's default.
	StorageClass string
}

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
func newBackend(cfg Config, log *slog.Logger) (backend, error) {
	switch cfg.Backend {
	case "", BackendGVisor:
		rt, err := gvisor.New(gvisor.Config{
			Runsc:       cfg.Runsc,
			StateDir:    filepath.Join(cfg.Data, "runtime"),
			Platform:    cfg.Platform,
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
		// client-go logs through klog, and reports what it cannot return
		// (a stream torn down by a cancelled exec, say) as "unhandled":
		// both go to the server's log, the latter at debug level.
		klog.SetSlogLogger(log.With("component", "client-go"))
		utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(_ context.Context, err error, msg string, kv ...any) {
			log.Debug("client-go: "+msg, append([]any{"err", err}, kv...)...)
		}}
		k := cfg.Kube
		scope, err := kube.NewScope(k.Namespace, k.ServerNamespace)
		if err != nil {
			return backend{}, err
		}
		var rc *rest.Config
		if k.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
		} else {
			rc, err = rest.InClusterConfig()
		}
		if err != nil {
			return backend{}, fmt.Errorf("kube: loading the cluster config: %w", err)
		}
		rc.QPS, rc.Burst = 50, 100
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return backend{}, fmt.Errorf("kube: %w", err)
		}
		classes := map[string]string{}
		if k.RuntimeClass != "" {
			classes[sandbox.RuntimeGVisor] = k.RuntimeClass
		}
		// The other runtimes are RuntimeClasses of their own name.
		classes[sandbox.RuntimeKataCLH] = sandbox.RuntimeKataCLH
		classes[sandbox.RuntimeKataFC] = sandbox.RuntimeKataFC
		rt, err := kube.New(kube.Config{
			Client: client, Rest: rc, Scope: scope, RuntimeClasses: classes,
			ServiceAccount: k.ServiceAccount, StorageClass: k.StorageClass,
		})
		if err != nil {
			return backend{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Isolate(ctx); err != nil {
			return backend{}, err
		}
		return backend{rt: rt}, nil
	}
	return backend{}, fmt.Errorf("unknown backend %q: gvisor or kube", cfg.Backend)
}
