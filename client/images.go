package client

import (
	"context"
	"github.com/sandboxd/sandbox/wire"
)

// Image is an image the org may start from: its own and the server's
// (LeaseRequest.Image, or RunCodeRequest.Image for a new interpreter
// session), and the class images (Scope ImageScopeClass: LeaseRequest.Class
// names them; Holds says what each has). Its time is Unix seconds;
// Created converts it.
type Image = wire.Image

// ImageScopeClass is the Scope of a class image in Images' answer.
const ImageScopeClass = wire.ImageScopeClass

// PullRequest pulls Ref into the org's images under Name. The registry
// must be one the operator allows (else 403); the image counts against
// the org's disk quota (403 quota_exceeded when it does not fit).
type PullRequest = wire.PullRequest

// PullImage pulls an image into the org's images and returns it.
func (c *Client) PullImage(ctx context.Context, req PullRequest) (*Image, error) {
	var im Image
	return &im, c.do(ctx, request{method: "POST", path: "/v1/images", in: req, out: &im})
}

// Images lists the images the org may lease: its own, then the server's.
func (c *Client) Images(ctx context.Context) ([]Image, error) {
	var b struct {
		Images []Image `json:"images"`
	}
	return b.Images, c.do(ctx, request{method: "GET", path: "/v1/images", out: &b})
}

// DeleteImage deletes one of the org's images and returns it; refused
// (409) while a live sandbox runs it.
func (c *Client) DeleteImage(ctx context.Context, name string) (*Image, error) {
	var im Image
	return &im, c.do(ctx, request{method: "DELETE", path: "/v1/images/" + esc(name), out: &im})
}

// SnapshotRequest names the image a snapshot makes.
type SnapshotRequest = wire.SnapshotRequest

// Snapshot saves sandbox id's filesystem — what it changed in its root
// (packages installed) and with Workdir its workdir — as an image of the
// org, which later leases and interpreter sessions can start from. Memory
// is not saved (Fork copies it). A backend that cannot read a sandbox's
// changes answers 501.
func (c *Client) Snapshot(ctx context.Context, id string, req SnapshotRequest) (*Image, error) {
	var im Image
	return &im, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/snapshot", in: req, out: &im})
}
