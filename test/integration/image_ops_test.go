package integration_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/server"
)

// TestImageOps: snapshot and images through both typed doors — POST
// /v1/sandbox/{snapshot,images} and the MCP tools — on the real runtime:
// a sandbox's files saved as an image, listed for its org alone, leased
// again; bad input refused.
func TestImageOps(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnvConfig(t, server.Config{Images: imagesWithClasses(t)})
	id := e.lease("acme", nil)
	e.sh("acme", id, "mkdir -p ~/.config && echo typed > ~/.config/made-by && echo in-work > w.txt")

	im := e.must(http.StatusOK, "POST", "/v1/sandbox/snapshot", "acme", map[string]any{"id": id, "name": "typed", "workdir": true}).JSON(t)
	if im["name"] != "typed" || im["scope"] != "org" || !strings.HasPrefix(im["digest"].(string), "sha256:") || im["source"] != "snapshot of "+id {
		t.Fatalf("snapshot: %v", im)
	}
	list := e.must(http.StatusOK, "POST", "/v1/sandbox/images", "acme", map[string]any{}).JSON(t)
	if imgs, _ := list["images"].([]any); len(ownImages(imgs)) != 1 || imgs[0].(map[string]any)["digest"] != im["digest"] {
		t.Errorf("images: %v", list)
	}
	if imgs, _ := e.must(http.StatusOK, "POST", "/v1/sandbox/images", "globex", map[string]any{}).JSON(t)["images"].([]any); imgs == nil || len(ownImages(imgs)) != 0 {
		t.Errorf("globex's images: %v", imgs)
	}
	again := e.lease("acme", map[string]any{"image": "typed"})
	if out := e.sh("acme", again, "cat ~/.config/made-by w.txt"); out != "typed\nin-work\n" {
		t.Errorf("a lease of the snapshot: %q", out)
	}
	for _, bad := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{"name": "x"}, http.StatusBadRequest},
		{map[string]any{"id": id, "name": "../x"}, http.StatusBadRequest},
		{map[string]any{"id": id, "name": "exec"}, http.StatusBadRequest},
		{map[string]any{"id": id, "name": "x", "org": "globex"}, http.StatusBadRequest},
		{map[string]any{"id": "sb_nosuch", "name": "x"}, http.StatusNotFound},
	} {
		e.must(bad.status, "POST", "/v1/sandbox/snapshot", "acme", bad.body)
	}
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox/images", "acme", map[string]any{"org": "globex"})

	// MCP: the same operations as tools.
	ctx := context.Background()
	s, err := e.mcpSession(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, msg := call(t, s, "snapshot", map[string]any{"id": again, "name": "from-mcp"}); r["name"] != "from-mcp" || r["scope"] != "org" {
		t.Fatalf("snapshot tool: %v %s", r, msg)
	}
	r, msg := call(t, s, "images", map[string]any{})
	var names []string
	for _, im := range ownImages(r["images"].([]any)) {
		names = append(names, im.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "from-mcp,typed" && strings.Join(names, ",") != "typed,from-mcp" {
		t.Errorf("images tool: %v %s", r, msg)
	}
	if _, msg := call(t, s, "snapshot", map[string]any{"id": again, "name": "bad name"}); !strings.HasPrefix(msg, "invalid:") {
		t.Errorf("snapshot tool with a bad name: %q", msg)
	}
	g, err := e.mcpSession(ctx, "globex")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if r, msg := call(t, g, "images", map[string]any{}); msg != "" || len(ownImages(r["images"].([]any))) != 0 {
		t.Errorf("globex's images tool: %v %s", r, msg)
	}
}
