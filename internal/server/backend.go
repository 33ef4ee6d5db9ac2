package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/wire"
)

// Backends.
const (
	BackendGVisor = "gvisor"
	BackendKube   = "kube"
)

// backend is a runtime and what differs with it: where the images live,
// what must settle before recovery. What the runtime can do beyond its
// core (the runner among it) is runtime.Discover's to find.
type backend struct {
	rt runtime.Backend
	// settle waits for work a killed server left running; nil if none.
	settle func(context.Context) error
	// imageReady says whether an image can run here; nil means any can
	// (the cluster's nodes hold them, and a missing one fails the pod with
	// the cluster's reason).
	imageReady func(name string) error
	// library keeps pulled images; nil where the backend runs none.
	library imageLibrary
	// classes lists the class images the backend can start sandboxes of.
	classes func() []catalog.ImageInfo
}

// classImages lists, for the image list, the class images of which
// have says a class can run here (and where it came from and how big it
// is, where the backend knows).
func classImages(have func(name string) (catalog.ImageInfo, bool)) func() []catalog.ImageInfo {
	return func() []catalog.ImageInfo {
		var out []catalog.ImageInfo
		for _, name := range sandbox.ClassNames() {
			cl := sandbox.MustClass(name)
			r, err := image.RecipeFor(cl.Image)
			if err != nil || !r.Buildable {
				continue
			}
			im, ok := have(cl.Image)
			if !ok {
				continue
			}
			im.Name, im.Class, im.Holds, im.Scope = cl.Image, cl.Name, r.Holds, wire.ImageScopeClass
			out = append(out, im)
		}
		return out
	}
}

// builtClass is a class image built in dir (scripts/build-images.sh):
// its size and build time from its manifest.
func builtClass(dir string) func(string) (catalog.ImageInfo, bool) {
	return func(name string) (catalog.ImageInfo, bool) {
		m, err := image.Inspect(dir, name)
		if err != nil {
			return catalog.ImageInfo{}, false
		}
		return catalog.ImageInfo{Source: fmt.Sprintf("Debian %s (%d packages), built by sandbox image build", m.Suite, m.Installed),
			SizeBytes: m.SizeBytes, CreatedAt: m.BuiltAt.Unix()}, true
	}
}

// imageLibrary is what both the lease (finding an image) and the catalog
// (pulling and making one) need of a backend's images.
type imageLibrary interface {
	service.Library
	catalog.Library
}

// writeLayers writes each layer to a file of a staging directory beside
// the images (never a tmpfs /tmp: a snapshot may be large); done removes
// them.
func writeLayers(dir string, layers []func(io.Writer) error) (files []string, done func(), err error) {
	tmp, err := os.MkdirTemp(dir, ".snapshot-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { os.RemoveAll(tmp) }
	for i, write := range layers {
		f, err := os.Create(filepath.Join(tmp, fmt.Sprintf("layer-%d.tar", i)))
		if err == nil {
			err = write(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			done()
			return nil, nil, err
		}
		files = append(files, f.Name())
	}
	return files, done, nil
}

// registry is the library of a backend whose nodes pull images from their
// registries (Kubernetes): a pull is checked and recorded, pinned by
// digest, never unpacked here.
type registry struct {
	dir  string
	push string // where snapshots go (--image-push, resolved); empty refuses them
	rt   *kube.Runtime
}

func (l *registry) Pull(ctx context.Context, ref string, auth *image.Auth, lim image.Limits, _ image.Progress) (*image.Pulled, error) {
	img, err := image.Remote(ctx, ref, auth)
	if err != nil {
		return nil, err
	}
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	org = sandbox.Slug(org)
	secret := ""
	if auth != nil {
		// The node pulls too: the credentials become an imagePullSecret
		// of the org's own, which the org's pods of the image name.
		r, err := name.ParseReference(ref)
		if err != nil {
			return nil, err
		}
		if secret, err = l.rt.PullSecret(ctx, org, r.Context().RegistryStr(), auth.Username, auth.Password); err != nil {
			return nil, err
		}
	}
	return image.Record(ctx, l.dir, img, ref, org, secret)
}

// access is how a pod of org (its slug) pulls a recorded image: the
// reference and the imagePullSecret, if it needs one.
func (l *registry) access(org, name string) (ref, secret string) {
	if !image.IsDigest(name) {
		return "", ""
	}
	p, err := image.InspectPulled(l.dir, name)
	if err != nil {
		return "", ""
	}
	a := p.AccessOf(org)
	return a.Pinned, a.Secret
}

// Forget drops the org's imagePullSecret of a deleted image once none of
// the org's images left (digests) pulls with it.
func (l *registry) Forget(ctx context.Context, digest string, left []string) error {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return err
	}
	org = sandbox.Slug(org)
	p, err := image.InspectPulled(l.dir, digest)
	if err != nil {
		return nil // no record: nothing was kept for it
	}
	// Only a secret of the org's own: a record from before secrets were
	// per org names one every org of the image shares.
	a, ok := p.Access[org]
	secret := a.Secret
	if !ok || secret == "" {
		return nil
	}
	for _, d := range left {
		if q, err := image.InspectPulled(l.dir, d); err == nil && q.AccessOf(org).Secret == secret {
			return nil
		}
	}
	return l.rt.DropPullSecret(ctx, org, secret)
}

// Rootfs has nothing to inspect: the image is unpacked on a node.
func (l *registry) Rootfs(digest string) (string, error) {
	if _, err := image.InspectPulled(l.dir, digest); err != nil {
		return "", err
	}
	return "", nil
}

func (l *registry) Seeded(name string) bool {
	p, err := image.InspectPulled(l.dir, name)
	return err == nil && p.Seeded
}

func (l *registry) Inspect(name string) (*image.Pulled, error) {
	return image.InspectPulled(l.dir, name)
}

// User is the image config's, by number only: its /etc/passwd is on a
// node, not here.
func (l *registry) User(name string) (*runtime.User, error) {
	p, err := image.InspectPulled(l.dir, name)
	if err != nil {
		return nil, err
	}
	return configUser("", p.User)
}

// Derive appends the layers to base's image, read from its registry, and
// pushes the result to the --image-push repository: the nodes pull it
// from there.
func (l *registry) Derive(ctx context.Context, base, source string, lim image.Limits, layers ...func(io.Writer) error) (*image.Pulled, error) {
	if l.push == "" {
		return nil, sandbox.Errorf(sandbox.KindUnsupported, "snapshots on the kube backend need a repository the cluster pulls from: the operator passes --image-push")
	}
	p, err := image.InspectPulled(l.dir, base)
	if err != nil || p.Pinned == "" {
		return nil, sandbox.Errorf(sandbox.KindUnsupported, "a snapshot on the kube backend starts from a pulled image (a class image is on the nodes, in no registry)")
	}
	files, done, err := writeLayers(l.dir, layers)
	if err != nil {
		return nil, err
	}
	defer done()
	d, err := image.Append(ctx, l.dir, p.Pinned, files, strings.TrimSuffix(l.push, "/"), source, lim)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// env is what a recorded image's config asks for.
func (l *registry) env(name string) []string { return pulledEnv(l.dir, name) }

// podImage is the container image of a spec's image: a class's local
// image, or a pulled one by its pinned reference.
func (l *registry) podImage(name string) string {
	if image.IsDigest(name) {
		if p, err := image.InspectPulled(l.dir, name); err == nil && p.Pinned != "" {
			return p.Pinned
		}
	}
	return "sandbox/" + name + ":local"
}

// library is the pulled images of an images directory (internal/image),
// as the service reaches them.
type library struct{ dir string }

func (l *library) Pull(ctx context.Context, ref string, auth *image.Auth, lim image.Limits, progress image.Progress) (*image.Pulled, error) {
	img, err := image.Remote(ctx, ref, auth)
	if err != nil {
		return nil, err
	}
	return image.Unpack(ctx, l.dir, img, ref, lim, progress)
}

func (l *library) Rootfs(digest string) (string, error) { return image.PulledRootfs(l.dir, digest) }

// User is who a pulled image's config asks its programs run as.
func (l *library) User(name string) (*runtime.User, error) {
	p, err := image.InspectPulled(l.dir, name)
	if err != nil {
		return nil, err
	}
	root, _ := image.PulledRootfs(l.dir, name)
	return configUser(root, p.User)
}

func configUser(rootfs, user string) (*runtime.User, error) {
	uid, gid, set, err := image.ConfigUser(rootfs, user)
	if err != nil || !set {
		return nil, err
	}
	return &runtime.User{UID: uid, GID: gid}, nil
}

func (l *library) Inspect(name string) (*image.Pulled, error) {
	return image.InspectPulled(l.dir, name)
}

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
	files, done, err := writeLayers(l.dir, layers)
	if err != nil {
		return nil, err
	}
	defer done()
	return image.Derive(ctx, l.dir, base, baseRootfs, l.env(base), files, source, lim)
}

// rootfs is the rootfs of a class image or of a pulled one (by digest).
func (l *library) rootfs(name string) (string, error) {
	if image.IsDigest(name) {
		return image.PulledRootfs(l.dir, name)
	}
	return image.Rootfs(l.dir, name)
}

// env is what a pulled image's config asks for; a class image asks none.
func (l *library) env(name string) []string { return pulledEnv(l.dir, name) }

// pulledEnv is the Env of the config of the pulled image name (a digest)
// in dir; nil for a class image or one no longer there.
func pulledEnv(dir, name string) []string {
	if !image.IsDigest(name) {
		return nil
	}
	p, err := image.InspectPulled(dir, name)
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

// pidMaxWanted is the kernel.pid_max below which a host runs out of task
// ids before it runs out of memory for idle sandboxes (~30 host tasks
// each): systemd's default.
const pidMaxWanted = 4194304

// warnPidMax says so at start when this host's kernel.pid_max is lower
// (the kernel's own 32768, on a host whose init is not systemd, stalls the
// host near 1,000 idle sandboxes: BENCHMARKS.md, density).
func warnPidMax(log *slog.Logger) {
	raw, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err == nil && n < pidMaxWanted {
		log.Warn("kernel.pid_max is low for many sandboxes: each idle one holds ~30 host tasks (raise it: sysctl -w kernel.pid_max=4194304; scripts/up.sh does)",
			"pidMax", n, "sandboxesBeforeItRunsOut", n/32)
	}
}

// newBackend builds the backend of cfg.Backend.
func newBackend(ctx context.Context, cfg Config, log *slog.Logger) (backend, error) {
	switch cfg.Backend {
	case "", BackendGVisor:
		warnPidMax(log)
		lib := &library{dir: cfg.Images}
		image.SweepStaging(cfg.Images)
		bounds, err := cfg.Service.NetworkBounds()
		if err != nil {
			return backend{}, err
		}
		rt, err := gvisor.New(gvisor.Config{
			Options:     cfg.GVisor,
			StateDir:    filepath.Join(cfg.Data, "runtime"),
			ImageRootfs: lib.rootfs,
			ImageEnv:    lib.env,
			Runner:      cfg.Runner,
			Network:     !bounds.None(),
			NetworkOpen: bounds.Private,
			Log:         log,
		})
		if err != nil {
			return backend{}, err
		}
		return backend{rt: rt.Backend(), settle: rt.Settle, imageReady: localImage(cfg.Images), library: lib, classes: classImages(builtClass(cfg.Images))}, nil
	case BackendKube:
		push := cfg.Kube.PushRepo
		if push != "" && cfg.Kube.PushResolve {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			resolved, err := kube.ResolvePush(rctx, push, net.DefaultResolver.LookupHost)
			cancel()
			if err != nil {
				return backend{}, err
			}
			log.Info("snapshots are pushed to, and pulled by the nodes from, the registry's address", "imagePush", push, "resolved", resolved)
			push = resolved
		}
		lib := &registry{dir: cfg.Images, push: push}
		// The private ranges the operator opened come out of every
		// policy's except; the service refuses the flag when it is bad.
		bounds, err := cfg.Service.NetworkBounds()
		if err != nil {
			return backend{}, err
		}
		rt, err := kube.Open(ctx, cfg.Kube, kube.Hooks{Image: lib.podImage, ImageEnv: lib.env, PullSecret: lib.access, NetworkPrivate: bounds.Private}, log)
		if err != nil {
			return backend{}, err
		}
		lib.rt = rt
		// The nodes hold the class images (imported, or pulled from the
		// operator's registry): the server sees neither their size nor
		// whether a node has one, only which image a pod names.
		onNodes := func(name string) (catalog.ImageInfo, bool) {
			return catalog.ImageInfo{Source: lib.podImage(name) + " on the cluster's nodes"}, true
		}
		return backend{rt: rt.Backend(), library: lib, classes: classImages(onNodes)}, nil
	}
	return backend{}, fmt.Errorf("unknown backend %q: gvisor or kube", cfg.Backend)
}
