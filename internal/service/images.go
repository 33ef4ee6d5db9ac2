package service

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Images: a tenant may lease {"image": NAME} where NAME is one of its
// org's images or the operator's. An image is unpacked once per digest
// (internal/image); a name points at a digest, and a sandbox's row records
// the digest, so a name pointed elsewhere never changes a sandbox under
// it.

// ImageStore is the part of the store the images need.
type ImageStore interface {
	PutImage(ctx context.Context, im store.Image) error
	Images(ctx context.Context) ([]store.Image, error)
	ResolveImage(ctx context.Context, name string) (*store.Image, error)
	DeleteImage(ctx context.Context, name string, server bool) (*store.Image, error)
}

// Library unpacks and finds images on this server.
type Library interface {
	// Pull unpacks ref from its registry within lim, telling progress
	// (may be nil) after each layer.
	Pull(ctx context.Context, ref string, auth *image.Auth, lim image.Limits, progress image.Progress) (*image.Pulled, error)
	// Rootfs is a pulled image's rootfs, or an error when it is not here;
	// "" where the backend's nodes unpack it (nothing to inspect).
	Rootfs(digest string) (string, error)
	// User is who an image's config asks its programs run as (nil: the
	// backend's default), or image.ErrRootUser.
	User(image string) (*runtime.User, error)
	// Inspect is a pulled image's record (its config's command and
	// working directory among it).
	Inspect(image string) (*image.Pulled, error)
	// Seeded says whether an image carries a workdir (under SeedDir).
	Seeded(image string) bool
	// Derive makes an image of base (a class image or a digest) with the
	// layers each func writes as a tar applied on top, within lim.
	Derive(ctx context.Context, base, source string, lim image.Limits, layers ...func(io.Writer) error) (*image.Pulled, error)
}

// ImageRequest is the body of POST /v1/images: pull ref into the org's
// images under name.
type ImageRequest struct {
	Name     string `json:"name" jsonschema:"the image's name in your org (letters, digits, '.', '_', '-'; up to 64)"`
	Ref      string `json:"ref" jsonschema:"an OCI or Docker image reference, by tag or digest, from a registry the operator allows"`
	Username string `json:"username,omitempty" jsonschema:"registry username, for this pull only (never stored, never in a sandbox)"`
	Password string `json:"password,omitempty" jsonschema:"registry password or token, for this pull only"`
}

// ImageInfo is an image as the API shows it.
type ImageInfo struct {
	Name      string `json:"name"`
	Digest    string `json:"digest"`
	Source    string `json:"source"`
	SizeBytes int64  `json:"sizeBytes"`
	// Scope is org (the caller's org's own) or server (the operator's,
	// offered to every org).
	Scope     string `json:"scope"`
	CreatedAt int64  `json:"createdAt"` // Unix seconds
}

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

func (s *Service) images() (ImageStore, Library, error) {
	is, ok := s.d.Store.(ImageStore)
	if !ok || s.d.Library == nil {
		return nil, nil, sandbox.Errorf(sandbox.KindUnsupported, "this server keeps no images but its classes'")
	}
	return is, s.d.Library, nil
}

// allowed says whether the operator lets tenants pull ref: it must start
// with one of the --image-allow prefixes, at a path boundary.
func (s *Service) allowed(ref string) bool {
	for _, p := range s.cfg.ImageAllow {
		p = strings.TrimSuffix(p, "/")
		if ref == p || strings.HasPrefix(ref, p+"/") || strings.HasPrefix(ref, p+":") || strings.HasPrefix(ref, p+"@") {
			return true
		}
	}
	return false
}

// PullImage pulls ref for the caller's org under name, within what is
// left of its disk quota.
func (s *Service) PullImage(ctx context.Context, req ImageRequest) (*ImageInfo, error) {
	return s.PullImageTo(ctx, req, nil)
}

// PullImageTo is PullImage telling progress after each layer unpacked.
func (s *Service) PullImageTo(ctx context.Context, req ImageRequest, progress image.Progress) (*ImageInfo, error) {
	is, lib, err := s.images()
	if err != nil {
		return nil, err
	}
	if err := CheckImageName(req.Name); err != nil {
		return nil, err
	}
	if req.Ref == "" || len(req.Ref) > 512 || strings.ContainsAny(req.Ref, " \n\t\x00") {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "ref must be an image reference such as registry.example/team/tool:1.2")
	}
	if !s.allowed(req.Ref) {
		if len(s.cfg.ImageAllow) == 0 {
			return nil, sandbox.Errorf(sandbox.KindForbidden, "this server lets no tenant pull images (the operator allows registries with --image-allow)")
		}
		return nil, sandbox.Errorf(sandbox.KindForbidden, "%s is not from a registry this server allows (%s)", req.Ref, strings.Join(s.cfg.ImageAllow, ", "))
	}
	org, lim, release, err := s.imageRoom(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	var auth *image.Auth
	if req.Username != "" || req.Password != "" {
		auth = &image.Auth{Username: req.Username, Password: req.Password}
	}
	start := time.Now()
	p, err := lib.Pull(ctx, req.Ref, auth, lim, progress)
	if err != nil {
		return nil, imageError(err)
	}
	im := store.Image{Name: req.Name, Digest: p.Digest, Source: req.Ref, SizeBytes: p.SizeBytes, CreatedAt: s.now()}
	if err := is.PutImage(ctx, im); err != nil {
		return nil, err
	}
	s.log.Info("image pulled", "org", org, "name", req.Name, "ref", req.Ref, "digest", p.Digest, "bytes", p.SizeBytes, "took", time.Since(start))
	info := infoOf(im)
	return &info, nil
}

// imageRoom is what is left of the caller's org's disk quota, as the
// limits of an unpack. The org makes one image at a time: release, called
// once the image is recorded, lets the next one see it in the org's use
// (two at once would each be given the whole room).
func (s *Service) imageRoom(ctx context.Context) (org string, lim image.Limits, release func(), err error) {
	org, pol, err := s.callerPolicy(ctx)
	if err != nil {
		return "", lim, nil, err
	}
	release = s.lock("images of " + org)
	use, _, err := s.d.Store.Use(ctx, "")
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
type SnapshotRequest struct {
	Name    string `json:"name" jsonschema:"the new image's name in your org"`
	Workdir bool   `json:"workdir,omitempty" jsonschema:"include the workdir's files too (a project's volume is otherwise not part of an image)"`
}

// Snapshot saves sandbox id's filesystem — what it changed in its root
// (packages installed, files under site-packages) and, with Workdir, its
// workdir — as an image of the org on the sandbox's own image: later
// leases and interpreter sessions start from there. Memory is not part of
// an image (that is sleep and fork).
func (s *Service) Snapshot(ctx context.Context, id string, req SnapshotRequest) (*ImageInfo, error) {
	is, lib, err := s.images()
	if err != nil {
		return nil, err
	}
	if err := CheckImageName(req.Name); err != nil {
		return nil, err
	}
	org, lim, release, err := s.imageRoom(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	sb, work, done, err := s.use(ctx, id, true)
	if err != nil {
		return nil, err
	}
	defer done()
	if s.caps.Diff == nil {
		return nil, s.unsupported(runtime.CapDiff)
	}
	start := time.Now()
	layers := []func(io.Writer) error{func(w io.Writer) error {
		return withoutCredential(w, func(w io.Writer) error { return s.caps.Diff.RootfsChanges(work, sb.Name, w) })
	}}
	if req.Workdir {
		layers = append(layers, func(w io.Writer) error { return s.workdirLayer(ctx, sb, w) })
	}
	p, err := lib.Derive(work, sb.Image, "snapshot of "+sb.ID, lim, layers...)
	if err != nil {
		return nil, imageError(err)
	}
	im := store.Image{Name: req.Name, Digest: p.Digest, Source: "snapshot of " + sb.ID, SizeBytes: p.SizeBytes, CreatedAt: s.now()}
	if err := is.PutImage(ctx, im); err != nil {
		return nil, err
	}
	s.log.Info("sandbox snapshot", "org", org, "sandbox", sb.ID, "image", req.Name, "digest", p.Digest, "bytes", p.SizeBytes, "took", time.Since(start))
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

// SeedDir is where an image keeps the workdir a snapshot saved: the
// workdir itself is a mount (a fresh tmpfs, a project's volume) that would
// hide it, so a lease copies it in (seed) once the sandbox runs.
const SeedDir = image.SeedDir

// workdirLayer writes sb's workdir as a layer: the archive of it, each
// entry under SeedDir. The archive is the sandbox's own tar's: a name
// that would leave SeedDir once joined is the library's to refuse
// (image.ApplySeedLayer applies the layer confined there).
func (s *Service) workdirLayer(ctx context.Context, sb *sandbox.Sandbox, w io.Writer) error {
	archive := func(pw io.Writer) error {
		return s.Archive(ctx, sb.ID, "", false, func(string) io.Writer { return pw })
	}
	return rewriteLayer(w, archive, func(h *tar.Header) bool {
		h.Name = path.Join(SeedDir, h.Name)
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			h.Linkname = path.Join(SeedDir, h.Linkname)
		}
		return true
	})
}

// imageUser is the user sb's image asks for (nil for class images and
// images that ask for none); root only where the operator allows it.
func (s *Service) imageUser(img string) (*runtime.User, error) {
	if s.d.Library == nil || !image.IsDigest(img) {
		return nil, nil
	}
	u, err := s.d.Library.User(img)
	switch {
	case errors.Is(err, image.ErrRootUser) && s.cfg.ImageAllowRoot:
		return &runtime.User{}, nil
	case errors.Is(err, image.ErrRootUser):
		return nil, sandbox.Errorf(sandbox.KindInvalid, "the image runs as root, which this server does not allow (the operator may, with --image-allow-root)")
	case err != nil:
		return nil, sandbox.Wrap(sandbox.KindInvalid, err, "the image's user: "+err.Error())
	}
	return u, nil
}

// canRun refuses, before a lease, a "run" the image or the backend
// cannot honour.
func (s *Service) canRun(ctx context.Context, name string) error {
	if _, err := s.processes(); err != nil {
		return err
	}
	is, lib, err := s.images()
	if err != nil || name == "" {
		return sandbox.Errorf(sandbox.KindInvalid, "run starts a pulled image's own command: name one with image")
	}
	im, err := is.ResolveImage(ctx, name)
	if err != nil {
		return sandbox.Errorf(sandbox.KindInvalid, "no image %q in your org or on this server (GET /v1/images lists them)", name)
	}
	p, err := lib.Inspect(im.Digest)
	if err != nil {
		return sandbox.Wrap(sandbox.KindUnavailable, err, fmt.Sprintf("image %q is not on this server's disk any more: pull it again", name))
	}
	if len(p.Entrypoint)+len(p.Cmd) == 0 {
		return sandbox.Errorf(sandbox.KindInvalid, "image %q names no command (no Entrypoint or Cmd in its config): nothing to run", name)
	}
	return nil
}

// runImage starts sb's image's own command (its config's Entrypoint and
// Cmd, in its WorkingDir) as a background process: what a lease with
// "run" asks.
func (s *Service) runImage(ctx context.Context, sb *sandbox.Sandbox) (*Process, error) {
	if s.d.Library == nil || !image.IsDigest(sb.Image) {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "run starts a pulled image's own command; a class image has none")
	}
	p, err := s.d.Library.Inspect(sb.Image)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the image's record is gone: pull it again")
	}
	argv := append(append([]string{}, p.Entrypoint...), p.Cmd...)
	if len(argv) == 0 {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "the image names no command (no Entrypoint or Cmd in its config)")
	}
	dir := p.WorkingDir
	if dir == "" || !strings.HasPrefix(dir, "/") {
		dir = sb.Workdir
	}
	return s.startProcess(ctx, sb.ID, ProcessRequest{Argv: argv}, dir)
}

// seed copies an image's saved workdir into a new sandbox's workdir.
func (s *Service) seed(ctx context.Context, sb *sandbox.Sandbox) error {
	if s.d.Library == nil || !image.IsDigest(sb.Image) || !s.d.Library.Seeded(sb.Image) {
		return nil
	}
	errBuf := NewOutput(4 << 10)
	// Each entry, not the directory: the workdir's own mount point is not
	// the sandbox user's to stamp.
	err := s.d.Runtime.Exec(ctx, sb.Name, runtime.ExecRequest{Argv: []string{"find", "/" + SeedDir, "-mindepth", "1", "-maxdepth", "1", "-exec", "cp", "-a", "{}", sb.Workdir + "/", ";"},
		Dir: "/", Stderr: errBuf})
	if err != nil {
		return fmt.Errorf("seeding the workdir: %w: %s", err, errBuf.String())
	}
	return nil
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

// Images lists the images the caller's org may lease: its own, then the
// server's.
func (s *Service) Images(ctx context.Context) ([]ImageInfo, error) {
	is, _, err := s.images()
	if err != nil {
		return nil, err
	}
	list, err := is.Images(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ImageInfo, 0, len(list))
	for _, im := range list {
		out = append(out, infoOf(im))
	}
	return out, nil
}

// DeleteImage drops one of the org's images (its files go at the next
// collection no name or sandbox holds them), refused while a live sandbox
// runs it.
func (s *Service) DeleteImage(ctx context.Context, name string) (*ImageInfo, error) {
	is, _, err := s.images()
	if err != nil {
		return nil, err
	}
	im, err := is.DeleteImage(ctx, name, false)
	if err != nil {
		return nil, err
	}
	info := infoOf(*im)
	return &info, nil
}

// resolveImage turns a lease's image name into the digest a row records,
// refusing one the class cannot run and saying what it lacks.
func (s *Service) resolveImage(ctx context.Context, class sandbox.Class, name string) (string, error) {
	is, lib, err := s.images()
	if err != nil {
		return "", sandbox.Errorf(sandbox.KindInvalid, "image %q is not allowed for class %s (allowed: %s)", name, class.Name, class.Image)
	}
	im, err := is.ResolveImage(ctx, name)
	if err != nil {
		return "", sandbox.Errorf(sandbox.KindInvalid, "no image %q in your org or on this server (GET /v1/images lists them)", name)
	}
	rootfs, err := lib.Rootfs(im.Digest)
	if err != nil {
		return "", sandbox.Wrap(sandbox.KindUnavailable, err, fmt.Sprintf("image %q is not on this server's disk any more: pull it again", name))
	}
	if missing := image.Missing(rootfs, class.Name); rootfs != "" && len(missing) > 0 {
		return "", sandbox.Errorf(sandbox.KindInvalid, "image %q cannot run a %s sandbox: it lacks %s", name, class.Name, strings.Join(missing, ", "))
	}
	if _, err := s.imageUser(im.Digest); err != nil {
		return "", err
	}
	return im.Digest, nil
}
