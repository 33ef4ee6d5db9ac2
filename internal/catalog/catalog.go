// Package catalog is an org's images as the API offers them: pull one
// from a registry the operator allows, save a sandbox as one (snapshot),
// list and delete them. It stands on the service's seam (Sandboxes: use
// this sandbox, read its workdir, the caller's quotas) like terminal and
// interp do; leasing an image is the service's (it resolves the name).
package catalog

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/sandboxd/sandbox/wire"
	"io"
	"log/slog"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/credential"
	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Store is the part of the store the catalog needs.
type Store interface {
	PutImage(ctx context.Context, im store.Image) error
	Images(ctx context.Context) ([]store.Image, error)
	DeleteImage(ctx context.Context, name string, server bool) (*store.Image, error)
	// Use is the caller's org's use, its disk among it.
	Use(ctx context.Context, project string) (quota.Use, bool, error)
}

// Library unpacks and makes images on this server.
type Library interface {
	// Pull unpacks ref from its registry within lim, telling progress
	// (may be nil) after each layer.
	Pull(ctx context.Context, ref string, auth *image.Auth, lim image.Limits, progress image.Progress) (*image.Pulled, error)
	// Derive makes an image of base (a class image or a digest) with the
	// layers each func writes as a tar applied on top, within lim.
	Derive(ctx context.Context, base, source string, lim image.Limits, layers ...func(io.Writer) error) (*image.Pulled, error)
}

// Forgetter is a Library that keeps something of an org's beyond an
// image's row (the kube backend: the org's imagePullSecret, which its
// nodes pull with): told of each image the org deletes, with the digests
// of the org's images left, it drops what none of them needs.
type Forgetter interface {
	Forget(ctx context.Context, digest string, left []string) error
}

// Sandboxes is the service's seam the catalog stands on.
type Sandboxes interface {
	// Use opens a piece of work on a running sandbox of the caller's org
	// (waking it); done ends it.
	Use(ctx context.Context, id string) (sb *sandbox.Sandbox, work context.Context, done func(), err error)
	// Archive writes a sandbox's directory as a tar.
	Archive(ctx context.Context, id, path string, gz bool, head func(full string) io.Writer) error
}

// Quotas tell the quota policy in force for the caller's org
// (internal/usage): its disk quota bounds an image's unpack.
type Quotas interface {
	Policy(ctx context.Context) (quota.Policy, error)
}

// Config is the catalog's part of the server's configuration.
type Config struct {
	// Allow are the reference prefixes (a registry, or a registry and
	// repository path) tenants may pull images from; empty allows none.
	Allow []string
}

// RegisterFlags defines the catalog's flag on fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("image-allow", "a registry or repository prefix tenants may pull images from (POST /v1/images), e.g. registry.example.com/team; repeatable; none by default", func(v string) error {
		if v == "" || strings.ContainsAny(v, " \t") {
			return errors.New("an image prefix such as registry.example.com/team")
		}
		c.Allow = append(c.Allow, v)
		return nil
	})
}

// Catalog is the org's images.
type Catalog struct {
	cfg  Config
	sb   Sandboxes
	q    Quotas
	st   Store
	lib  Library
	diff runtime.Differ // nil: the backend cannot snapshot
	// backend names the backend in what it cannot do.
	backend string
	// classes lists the class images this server can start from; nil
	// lists none.
	classes func() []ImageInfo
	log     *slog.Logger
	now     func() time.Time

	mu    sync.Mutex
	locks map[string]*sync.Mutex // per org: one image made at a time
}

// New is the catalog over sb, its disk bounded by the policy q tells; diff
// is nil where the backend cannot read a
// sandbox's changes (snapshots answer 501).
func New(cfg Config, sb Sandboxes, q Quotas, st Store, lib Library, diff runtime.Differ, backend string, log *slog.Logger) *Catalog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Catalog{cfg: cfg, sb: sb, q: q, st: st, lib: lib, diff: diff, backend: backend, log: log, now: time.Now, locks: map[string]*sync.Mutex{}}
}

// WithClasses makes the image list name the class images too, as list
// tells them (the backend knows which it has and where they came from):
// "what can I start from" has one answer.
func (c *Catalog) WithClasses(list func() []ImageInfo) *Catalog {
	c.classes = list
	return c
}

// lock takes the org's image lock until the returned func is called.
func (c *Catalog) lock(org string) func() {
	c.mu.Lock()
	l := c.locks[org]
	if l == nil {
		l = &sync.Mutex{}
		c.locks[org] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// ImageRequest is the body of POST /v1/images: pull ref into the org's
// images under name.
type ImageRequest = wire.PullRequest

// ImageInfo is an image as the API shows it.
type ImageInfo = wire.Image

func infoOf(im store.Image) ImageInfo {
	scope := "org"
	if im.Server {
		scope = "server"
	}
	return ImageInfo{Name: im.Name, Digest: im.Digest, Source: im.Source, SizeBytes: im.SizeBytes, Scope: scope, CreatedAt: im.CreatedAt.Unix()}
}

var imageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckImageName refuses a name that is not an image name.
func CheckImageName(name string) error {
	if !imageName.MatchString(name) {
		return sandbox.Errorf(sandbox.KindInvalid, "image name %q: use letters, digits, '.', '_' and '-', up to 64, starting with a letter or digit", name)
	}
	if _, err := sandbox.LookupClass(name); err == nil || name == "exec" {
		return sandbox.Errorf(sandbox.KindInvalid, "image name %q is a class image's", name)
	}
	return nil
}

// allowed says whether the operator lets tenants pull ref: it must start
// with one of the --image-allow prefixes, at a path boundary.
func (c *Catalog) allowed(ref string) bool {
	for _, p := range c.cfg.Allow {
		p = strings.TrimSuffix(p, "/")
		if ref == p || strings.HasPrefix(ref, p+"/") || strings.HasPrefix(ref, p+":") || strings.HasPrefix(ref, p+"@") {
			return true
		}
	}
	return false
}

// PullImage pulls ref for the caller's org under name, within what is
// left of its disk quota.
func (c *Catalog) PullImage(ctx context.Context, req ImageRequest) (*ImageInfo, error) {
	return c.PullImageTo(ctx, req, nil)
}

// PullImageTo is PullImage telling progress after each layer unpacked.
func (c *Catalog) PullImageTo(ctx context.Context, req ImageRequest, progress image.Progress) (*ImageInfo, error) {
	if err := CheckImageName(req.Name); err != nil {
		return nil, err
	}
	if req.Ref == "" || len(req.Ref) > 512 || strings.ContainsAny(req.Ref, " \n\t\x00") {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "ref must be an image reference such as registry.example/team/tool:1.2")
	}
	if !c.allowed(req.Ref) {
		if len(c.cfg.Allow) == 0 {
			return nil, sandbox.Errorf(sandbox.KindForbidden, "this server lets no tenant pull images (the operator allows registries with --image-allow)")
		}
		return nil, sandbox.Errorf(sandbox.KindForbidden, "%s is not from a registry this server allows (%s)", req.Ref, strings.Join(c.cfg.Allow, ", "))
	}
	org, lim, release, err := c.imageRoom(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	var auth *image.Auth
	if req.Username != "" || req.Password != "" {
		auth = &image.Auth{Username: req.Username, Password: req.Password}
	}
	start := time.Now()
	p, err := c.lib.Pull(ctx, req.Ref, auth, lim, progress)
	if err != nil {
		return nil, imageError(err)
	}
	im := store.Image{Name: req.Name, Digest: p.Digest, Source: req.Ref, SizeBytes: p.SizeBytes, CreatedAt: c.now()}
	if err := c.st.PutImage(ctx, im); err != nil {
		return nil, err
	}
	c.log.Info("image pulled", "org", org, "name", req.Name, "ref", req.Ref, "digest", p.Digest, "bytes", p.SizeBytes, "took", time.Since(start))
	info := infoOf(im)
	return &info, nil
}

// imageRoom is what is left of the caller's org's disk quota, as the
// limits of an unpack. The org makes one image at a time: release, called
// once the image is recorded, lets the next one see it in the org's use
// (two at once would each be given the whole room).
func (c *Catalog) imageRoom(ctx context.Context) (org string, lim image.Limits, release func(), err error) {
	org, err = sandbox.OrgRequired(ctx)
	if err != nil {
		return "", lim, nil, err
	}
	pol, err := c.q.Policy(ctx)
	if err != nil {
		return "", lim, nil, err
	}
	release = c.lock(org)
	use, _, err := c.st.Use(ctx, "")
	if err != nil {
		release()
		return "", lim, nil, err
	}
	if pol.DiskMiB != nil {
		room := *pol.DiskMiB - use.DiskMiB
		if room <= 0 {
			release()
			return "", lim, nil, sandbox.Errorf(sandbox.KindQuota, "the org's disk quota (%d MiB) is used up: no room for an image", *pol.DiskMiB)
		}
		lim.Bytes = room << 20
	}
	return org, lim, release, nil
}

// SnapshotRequest is the body of POST /v1/sandbox/{id}/snapshot.
type SnapshotRequest = wire.SnapshotRequest

// Snapshot saves sandbox id's filesystem — what it changed in its root
// (packages installed, files under site-packages) and, with Workdir, its
// workdir — as an image of the org on the sandbox's own image: later
// leases and interpreter sessions start from there. Memory is not part of
// an image (that is sleep and fork).
func (c *Catalog) Snapshot(ctx context.Context, id string, req SnapshotRequest) (*ImageInfo, error) {
	if err := CheckImageName(req.Name); err != nil {
		return nil, err
	}
	org, lim, release, err := c.imageRoom(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	sb, work, done, err := c.sb.Use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if c.diff == nil {
		return nil, runtime.Unsupported(c.backend, runtime.CapDiff)
	}
	start := time.Now()
	layers := []func(io.Writer) error{func(w io.Writer) error {
		return withoutCredential(w, func(w io.Writer) error { return c.diff.RootfsChanges(work, sb.Name, w) })
	}}
	if req.Workdir {
		layers = append(layers, func(w io.Writer) error { return c.workdirLayer(ctx, sb, w) })
	}
	p, err := c.lib.Derive(work, sb.Image, "snapshot of "+sb.ID, lim, layers...)
	if err != nil {
		return nil, imageError(err)
	}
	im := store.Image{Name: req.Name, Digest: p.Digest, Source: "snapshot of " + sb.ID, SizeBytes: p.SizeBytes, CreatedAt: c.now()}
	if err := c.st.PutImage(ctx, im); err != nil {
		return nil, err
	}
	c.log.Info("sandbox snapshot", "org", org, "sandbox", sb.ID, "image", req.Name, "digest", p.Digest, "bytes", p.SizeBytes, "took", time.Since(start))
	info := infoOf(im)
	return &info, nil
}

// withoutCredential copies the layer produce writes to w, without the
// sandbox's credential directory: an image outlives the lease, and every
// sandbox of it would start with that sandbox's credential.
func withoutCredential(w io.Writer, produce func(io.Writer) error) error {
	dir := strings.TrimPrefix(path.Dir(CredentialPath), "/")
	return rewriteLayer(w, produce, func(h *tar.Header) bool {
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		return name != dir && !strings.HasPrefix(name, dir+"/") && !strings.HasPrefix(name, path.Dir(dir)+"/.wh."+path.Base(dir))
	})
}

// rewriteLayer copies the tar produce writes to w, each header through
// edit first (which may change it); an entry edit answers false for is
// left out.
func rewriteLayer(w io.Writer, produce func(io.Writer) error, edit func(*tar.Header) bool) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(produce(pw)) }()
	defer pr.Close()
	tr, tw := tar.NewReader(pr), tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			io.Copy(io.Discard, pr) // the archive's padding: its writer must not fail
			return tw.Close()
		}
		if err != nil {
			return err
		}
		if !edit(h) {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// CredentialPath is where a sandbox's lease credential is: never part of
// an image.
const CredentialPath = credential.Path

// workdirLayer writes sb's workdir as a layer: the archive of it, each
// entry under SeedDir. The archive is the sandbox's own tar's: a name
// that would leave SeedDir once joined is the library's to refuse
// (image.ApplySeedLayer applies the layer confined there).
func (c *Catalog) workdirLayer(ctx context.Context, sb *sandbox.Sandbox, w io.Writer) error {
	archive := func(pw io.Writer) error {
		return c.sb.Archive(ctx, sb.ID, "", false, func(string) io.Writer { return pw })
	}
	return rewriteLayer(w, archive, func(h *tar.Header) bool {
		h.Name = path.Join(image.SeedDir, h.Name)
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			h.Linkname = path.Join(image.SeedDir, h.Linkname)
		}
		return true
	})
}

// imageError says why an image could not be had, for the caller.
func imageError(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return err // the library said it for the caller
	}
	var le *image.LayerError
	switch {
	case errors.Is(err, image.ErrTooLarge):
		return sandbox.Wrap(sandbox.KindQuota, err, "the image is larger than what is left of the org's disk quota")
	case errors.As(err, &le):
		return sandbox.Wrap(sandbox.KindInvalid, err, fmt.Sprintf("the image was refused: layer %d: %v", le.Layer, le.Err))
	}
	switch image.RegistryStatus(err) {
	case http.StatusUnauthorized, http.StatusForbidden:
		return sandbox.Wrap(sandbox.KindInvalid, err, "the registry refused the credentials (or asked for some)")
	case http.StatusNotFound:
		return sandbox.Wrap(sandbox.KindNotFound, err, "the registry has no such image")
	}
	return sandbox.Wrap(sandbox.KindBadGateway, err, "the image could not be pulled")
}

// Images lists the images the caller's org may start from: its own, then
// the server's, then the class images.
func (c *Catalog) Images(ctx context.Context) ([]ImageInfo, error) {
	list, err := c.st.Images(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ImageInfo, 0, len(list))
	for _, im := range list {
		out = append(out, infoOf(im))
	}
	if c.classes != nil {
		out = append(out, c.classes()...)
	}
	return out, nil
}

// DeleteImage drops one of the org's images (its files go at the next
// collection no name or sandbox holds them), refused while a live sandbox
// runs it.
func (c *Catalog) DeleteImage(ctx context.Context, name string) (*ImageInfo, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	// Under the org's image lock: a pull under way (its secret made, its
	// row not yet written) is not among the images left.
	defer c.lock(org)()
	im, err := c.st.DeleteImage(ctx, name, false)
	if err != nil {
		return nil, err
	}
	if f, ok := c.lib.(Forgetter); ok {
		list, err := c.st.Images(ctx)
		if err == nil {
			left := make([]string, 0, len(list))
			for _, l := range list {
				left = append(left, l.Digest)
			}
			err = f.Forget(ctx, im.Digest, left)
		}
		if err != nil {
			// The image is gone; what the library kept for it stays
			// until the org's next delete.
			c.log.Warn("image deleted, its pull access kept", "org", org, "name", name, "err", err)
		}
	}
	info := infoOf(*im)
	return &info, nil
}
