package client_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/apicheck"
	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestClientImages: PullImage from a real registry on loopback (one the
// server allows), a lease on it, Images, Snapshot and a session on the
// snapshot, DeleteImage refused while in use; another org sees none of
// it. Each JSON exchange is held to the served OpenAPI document.
func TestClientImages(t *testing.T) {
	reg := testenv.NeedRegistry(t, false)
	s := testenv.ServeWith(t, gvisor.DefaultRunsc(), []string{"acme", "globex"}, testenv.Options{ImageAllow: []string{reg.Host}})
	doc, err := apicheck.Fetch(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(s.URL, s.Keys["acme"])
	c.HTTP = &http.Client{Transport: &checking{t: t, doc: doc}}
	ctx := context.Background()
	ref := reg.PushBusybox(t, "team/tool:1", map[string]string{"etc/greeting": "hello from the image\n"})

	im, err := c.PullImage(ctx, client.PullRequest{Name: "tool", Ref: ref})
	if err != nil || im.Name != "tool" || im.Scope != "org" || !strings.HasPrefix(im.Digest, "sha256:") || im.Source != ref || im.SizeBytes <= 0 || im.Created().IsZero() {
		t.Fatalf("pull: %+v %v", im, err)
	}
	if _, err := c.PullImage(ctx, client.PullRequest{Name: "x", Ref: "127.0.0.2:1/x:1"}); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a pull from a registry the server does not allow: %v", err)
	}
	if _, err := c.PullImage(ctx, client.PullRequest{Name: "bad name", Ref: ref}); client.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("a pull under a bad name: %v", err)
	}
	sb, err := c.Lease(ctx, client.LeaseRequest{Image: "tool"})
	if err != nil || sb.Image != im.Digest {
		t.Fatalf("lease on the image: %+v %v", sb, err)
	}
	if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "cat /etc/greeting"}); err != nil || r.Stdout != "hello from the image\n" {
		t.Errorf("in the pulled image: %+v %v", r, err)
	}
	if _, err := c.DeleteImage(ctx, "tool"); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("delete while a sandbox runs it: %v", err)
	}

	// A snapshot of an exec sandbox, and an interpreter session on it.
	base, err := c.Lease(ctx, client.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Exec(ctx, base.ID, client.ExecRequest{Command: "mkdir -p ~/.config && echo 41 > ~/.config/n && echo kept > notes.txt"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", r, err)
	}
	snap, err := c.Snapshot(ctx, base.ID, client.SnapshotRequest{Name: "tpl", Workdir: true})
	if err != nil || snap.Name != "tpl" || snap.Scope != "org" || snap.Source != "snapshot of "+base.ID {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	code := "import os\nprint(int(open(os.path.expanduser('~/.config/n')).read()) + 1, open('notes.txt').read().strip())"
	if r, err := c.RunCode(ctx, client.RunCodeRequest{Language: "py", Image: "tpl", Code: code}); err != nil || r.Stdout != "42 kept\n" {
		t.Errorf("a session on the snapshot: %+v %v", r, err)
	}
	if _, err := c.Snapshot(ctx, "sb_nosuch", client.SnapshotRequest{Name: "x"}); !client.IsNotFound(err) {
		t.Errorf("snapshot of no sandbox: %v", err)
	}

	all, err := c.Images(ctx)
	if err != nil {
		t.Fatalf("images: %v", err)
	}
	// The class images come last, each saying what it holds.
	list, classes := splitClasses(all)
	if len(list) != 2 || !slices.ContainsFunc(classes, func(im client.Image) bool { return im.Name == "exec" && im.Class == "exec" }) {
		t.Fatalf("images: %+v", all)
	}
	for _, cl := range classes {
		if cl.Class == "" || cl.Holds == "" || cl.Digest != "" || cl.SizeBytes == 0 {
			t.Errorf("class image: %+v", cl)
		}
	}
	names := map[string]string{}
	for _, i := range list {
		names[i.Name] = i.Digest
	}
	if names["tool"] != im.Digest || names["tpl"] != snap.Digest {
		t.Errorf("images: %+v", list)
	}
	g := client.New(s.URL, s.Keys["globex"])
	if l, err := g.Images(ctx); err != nil || len(l) == 0 {
		t.Errorf("globex's images: %+v %v", l, err)
	} else if own, _ := splitClasses(l); len(own) != 0 {
		t.Errorf("globex's images: %+v", l)
	}
	if _, err := g.DeleteImage(ctx, "tool"); !client.IsNotFound(err) {
		t.Errorf("globex deletes acme's image: %v", err)
	}
	if _, err := g.Snapshot(ctx, base.ID, client.SnapshotRequest{Name: "stolen"}); !client.IsNotFound(err) {
		t.Errorf("globex snapshots acme's sandbox: %v", err)
	}

	if _, err := c.End(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if d, err := c.DeleteImage(ctx, "tool"); err != nil || d.Digest != im.Digest {
		t.Errorf("delete: %+v %v", d, err)
	}
	if _, err := c.DeleteImage(ctx, "tool"); !client.IsNotFound(err) {
		t.Errorf("delete again: %v", err)
	}
}

// splitClasses parts an image list into the org's and server's images
// and the class images.
func splitClasses(all []client.Image) (own, classes []client.Image) {
	for _, im := range all {
		if im.Scope == client.ImageScopeClass {
			classes = append(classes, im)
		} else {
			own = append(own, im)
		}
	}
	return own, classes
}
