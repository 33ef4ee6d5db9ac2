package ops

import (
	"context"

	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Images is what the image ops (snapshot, images) need of the service.
// Pulling and deleting stay with the REST routes: an agent saves and
// lists templates, the org's people curate them.
type Images interface {
	Images(ctx context.Context) ([]catalog.ImageInfo, error)
	Snapshot(ctx context.Context, id string, req catalog.SnapshotRequest) (*catalog.ImageInfo, error)
}

var _ Images = (*catalog.Catalog)(nil)

func (o *Ops) images() (Images, error) {
	if o.imgs == nil {
		return nil, sandbox.Errorf(sandbox.KindUnsupported, "this server keeps no images but its classes'")
	}
	return o.imgs, nil
}

// SnapshotIn saves a sandbox as an image: the snapshot request itself,
// and the sandbox's id.
type SnapshotIn struct {
	ID string `json:"id" jsonschema:"the running sandbox to save"`
	catalog.SnapshotRequest
}

// Snapshot saves what sandbox in.ID changed in its root (and with
// workdir its workdir) as an image of the org named in.Name, and answers
// the image: a lease or run_code with {"image": name} starts from it.
func (o *Ops) Snapshot(ctx context.Context, in SnapshotIn) (*catalog.ImageInfo, error) {
	im, err := o.images()
	if err != nil {
		return nil, err
	}
	if err := needID(in.ID); err != nil {
		return nil, err
	}
	return im.Snapshot(ctx, in.ID, in.SnapshotRequest)
}

// ImagesIn asks for the images; it has no fields.
type ImagesIn struct{}

// ImagesOut is the images the org may lease.
type ImagesOut struct {
	Images []catalog.ImageInfo `json:"images"`
}

// ListImages lists the images the org may lease ({"image": name}): its
// own (scope org), then the server's (scope server).
func (o *Ops) ListImages(ctx context.Context, _ ImagesIn) (*ImagesOut, error) {
	im, err := o.images()
	if err != nil {
		return nil, err
	}
	list, err := im.Images(ctx)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []catalog.ImageInfo{}
	}
	return &ImagesOut{Images: list}, nil
}
