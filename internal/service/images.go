package service

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/internal/capture"
	"github.com/sandboxd/sandbox/wire"
	"strings"

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

// ImageStore is the part of the store a lease of an image needs (the
// org's catalog of images is internal/catalog's).
type ImageStore interface {
	ResolveImage(ctx context.Context, name string) (*store.Image, error)
}

// Library finds the images on this server (internal/catalog pulls and
// makes them).
type Library interface {
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
}

func (s *Service) images() (ImageStore, Library, error) {
	is := s.d.Images
	if is == nil || s.d.Library == nil {
		return nil, nil, sandbox.Errorf(sandbox.KindUnsupported, "this server keeps no images but its classes'")
	}
	return is, s.d.Library, nil
}

// SeedDir is where an image keeps the workdir a snapshot saved: the
// workdir itself is a mount (a fresh tmpfs, a project's volume) that would
// hide it, so a lease copies it in (seed) once the sandbox runs.
const SeedDir = image.SeedDir

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
	if s.caps.Runner == nil || s.procs == nil {
		return s.unsupported(runtime.CapRunner)
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
func (s *Service) runImage(ctx context.Context, sb *sandbox.Sandbox) (*wire.Process, error) {
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
	if s.procs == nil {
		return nil, s.unsupported(runtime.CapRunner)
	}
	return s.procs.StartIn(ctx, sb.ID, wire.ProcessRequest{Argv: argv}, dir)
}

// seed copies an image's saved workdir into a new sandbox's workdir.
func (s *Service) seed(ctx context.Context, sb *sandbox.Sandbox) error {
	if s.d.Library == nil || !image.IsDigest(sb.Image) || !s.d.Library.Seeded(sb.Image) {
		return nil
	}
	errBuf := capture.New(4 << 10)
	// Each entry, not the directory: the workdir's own mount point is not
	// the sandbox user's to stamp.
	err := s.d.Runtime.Exec(ctx, sb.Name, runtime.ExecRequest{Argv: []string{"find", "/" + SeedDir, "-mindepth", "1", "-maxdepth", "1", "-exec", "cp", "-a", "{}", sb.Workdir + "/", ";"},
		Dir: "/", Stderr: errBuf})
	if err != nil {
		return fmt.Errorf("seeding the workdir: %w: %s", err, errBuf.String())
	}
	return nil
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
