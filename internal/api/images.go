package api

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Images is what the image routes need.
type Images interface {
	PullImage(ctx context.Context, req catalog.ImageRequest) (*catalog.ImageInfo, error)
	PullImageTo(ctx context.Context, req catalog.ImageRequest, progress image.Progress) (*catalog.ImageInfo, error)
	Images(ctx context.Context) ([]catalog.ImageInfo, error)
	DeleteImage(ctx context.Context, name string) (*catalog.ImageInfo, error)
	Snapshot(ctx context.Context, id string, req catalog.SnapshotRequest) (*catalog.ImageInfo, error)
}

var _ Images = (*catalog.Catalog)(nil)

type imagesBody struct {
	Images []catalog.ImageInfo `json:"images"`
}

func (s *Server) imageRoutes() {
	s.handle("POST /v1/images", s.pullImage, doc{Summary: "Pull an image into the org's images, from a registry the operator allows (--image-allow); its bytes count against the disk quota. Lease it with {\"image\": name}. " +
		`With Accept: application/x-ndjson the answer streams: a line {"layer", "layers", "bytes"} after each layer unpacked, then {"image"} or {"error"}`,
		Body: typ[catalog.ImageRequest](), Answer: typ[catalog.ImageInfo](), AnswerRaw: ndjson, Status: 201, Errors: []int{400, 403, 404, 501, 502}})
	s.handle("GET /v1/images", s.listImages, doc{Summary: "The images the org may start from: its own and the server's (lease with {\"image\": name}), then the class images (scope class: lease with {\"class\": class}; holds says what each has)", Answer: typ[imagesBody](), Errors: []int{501}})
	s.handle("DELETE /v1/images/{name}", s.deleteImage, doc{Summary: "Delete one of the org's images (refused while a live sandbox runs it)", Answer: typ[catalog.ImageInfo](), Errors: []int{404, 409, 501}})
}

// snapshotRoutes are under each sandbox prefix.
func (s *Server) snapshotRoutes(p string) {
	s.handle("POST "+p+"/{id}/snapshot", s.snapshot, doc{Summary: "Save the sandbox's filesystem (what it changed in its root; with workdir, its workdir too) as an image of the org: " +
		"later leases and interpreter sessions start from there ({\"image\": name}). Memory is not part of an image",
		Body: typ[catalog.SnapshotRequest](), Answer: typ[catalog.ImageInfo](), Status: 201, Errors: []int{400, 403, 404, 409, 501, 502}})
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) error {
	var req catalog.SnapshotRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	im, err := s.Images.Snapshot(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, im)
	return nil
}

func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) error {
	var req catalog.ImageRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	if wantsStream(r) {
		return s.pullStream(w, r, req)
	}
	im, err := s.Images.PullImage(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, im)
	return nil
}

type pullProgress struct {
	Layer  int   `json:"layer"`
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
}

type pullEnd struct {
	Image *catalog.ImageInfo `json:"image,omitempty"`
	Error string             `json:"error,omitempty"`
}

// pullStream answers a pull as NDJSON: progress as each layer is
// unpacked, then the image. A refusal before the first layer is an
// ordinary error answer.
func (s *Server) pullStream(w http.ResponseWriter, r *http.Request, req catalog.ImageRequest) error {
	l := &lineWriter{w: w, rc: http.NewResponseController(w)}
	started := false
	begin := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", ndjson)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusCreated)
		}
	}
	im, err := s.Images.PullImageTo(r.Context(), req, func(done, layers int, bytes int64) {
		begin()
		l.line(pullProgress{Layer: done, Layers: layers, Bytes: bytes})
	})
	if err != nil && !started {
		return err
	}
	begin()
	if err != nil {
		l.line(pullEnd{Error: sandbox.Message(err)})
		return nil
	}
	l.line(pullEnd{Image: im})
	return nil
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Images.Images(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, imagesBody{Images: list})
	return nil
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) error {
	im, err := s.Images.DeleteImage(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, im)
	return nil
}
