package api

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandbox/internal/service"
)

// Images is what the image routes need.
type Images interface {
	PullImage(ctx context.Context, req service.ImageRequest) (*service.ImageInfo, error)
	Images(ctx context.Context) ([]service.ImageInfo, error)
	DeleteImage(ctx context.Context, name string) (*service.ImageInfo, error)
	Snapshot(ctx context.Context, id string, req service.SnapshotRequest) (*service.ImageInfo, error)
}

var _ Images = (*service.Service)(nil)

type imagesBody struct {
	Images []service.ImageInfo `json:"images"`
}

func (s *Server) imageRoutes() {
	s.handle("POST /v1/images", s.pullImage, doc{Summary: "Pull an image into the org's images, from a registry the operator allows (--image-allow); its bytes count against the disk quota. Lease it with {\"image\": name}",
		Body: typ[service.ImageRequest](), Answer: typ[service.ImageInfo](), Status: 201, Errors: []int{400, 403, 404, 501, 502}})
	s.handle("GET /v1/images", s.listImages, doc{Summary: "The images the org may lease: its own, then the server's", Answer: typ[imagesBody](), Errors: []int{501}})
	s.handle("DELETE /v1/images/{name}", s.deleteImage, doc{Summary: "Delete one of the org's images (refused while a live sandbox runs it)", Answer: typ[service.ImageInfo](), Errors: []int{404, 409, 501}})
}

// snapshotRoutes are under each sandbox prefix.
func (s *Server) snapshotRoutes(p string) {
	s.handle("POST "+p+"/{id}/snapshot", s.snapshot, doc{Summary: "Save the sandbox's filesystem (what it changed in its root; with workdir, its workdir too) as an image of the org: " +
		"later leases and interpreter sessions start from there ({\"image\": name}). Memory is not part of an image",
		Body: typ[service.SnapshotRequest](), Answer: typ[service.ImageInfo](), Status: 201, Errors: []int{400, 403, 404, 409, 501, 502}})
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) error {
	var req service.SnapshotRequest
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
	var req service.ImageRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	im, err := s.Images.PullImage(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, im)
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
