package catalog_test

import (
	"context"
	"errors"
	"github.com/sandboxd/sandbox/internal/files"
	"io"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime/fake"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/usage"
)

// library is a pure stand-in for the image library: it records what it
// was asked and answers a made-up image (the real library's pulls and
// derives are internal/image's tests and the runsc suites').
type library struct {
	pulls []string
	lim   image.Limits
}

func (l *library) Pull(ctx context.Context, ref string, _ *image.Auth, lim image.Limits, _ image.Progress) (*image.Pulled, error) {
	l.pulls, l.lim = append(l.pulls, ref), lim
	return &image.Pulled{Digest: "sha256:" + strings.Repeat("a", 64), SizeBytes: 42}, nil
}

func (l *library) Derive(context.Context, string, string, image.Limits, ...func(io.Writer) error) (*image.Pulled, error) {
	return nil, errors.New("no derive here")
}

func org(name string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: name})
}

// TestCatalog: the allow list at path boundaries, names, the disk quota
// as the pull's limit, listing and deleting through the real store, and a
// snapshot where the backend cannot read changes answered from the one
// place (501) — on the service over the fake runtime.
func TestCatalog(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := service.New(service.Config{}, service.Deps{Store: st, Runtime: fake.New(), Quotas: st})
	lib := &library{}
	fs := files.Join(svc, files.New(svc, 0, 0))
	c := catalog.New(catalog.Config{Allow: []string{"reg.example/team"}}, fs, usage.New(quota.Policy{}, st, st, &quota.Commands{}), st, lib, nil, "fake", nil)
	acme := org("acme")

	ok := sandbox.Kind(-1)
	for ref, want := range map[string]sandbox.Kind{
		"reg.example/team/tool:1":    ok,
		"reg.example/team:1":         ok,
		"reg.example/teamx/tool:1":   sandbox.KindForbidden, // not at a path boundary
		"other.example/team/tool:1":  sandbox.KindForbidden,
		"reg.example/team/a b":       sandbox.KindInvalid,
		"":                           sandbox.KindInvalid,
		strings.Repeat("r", 600):     sandbox.KindInvalid,
		"reg.example/team@sha256:00": ok,
	} {
		_, err := c.PullImage(acme, catalog.ImageRequest{Name: "tool", Ref: ref})
		if want == ok && err != nil || want != ok && sandbox.KindOf(err) != want {
			t.Errorf("pull %q: %v, want %q", ref, err, want)
		}
	}
	if lib.lim.Bytes <= 0 {
		t.Errorf("the pull was not bounded by the org's disk quota: %+v", lib.lim)
	}
	for _, bad := range []string{"", "dev", "exec", "a/b", "-x", strings.Repeat("n", 65)} {
		if _, err := c.PullImage(acme, catalog.ImageRequest{Name: bad, Ref: "reg.example/team/x:1"}); sandbox.KindOf(err) != sandbox.KindInvalid {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	list, err := c.Images(acme)
	if err != nil || len(list) != 1 || list[0].Name != "tool" || list[0].Scope != "org" || list[0].SizeBytes != 42 {
		t.Fatalf("images: %+v %v", list, err)
	}
	if other, err := c.Images(org("globex")); err != nil || len(other) != 0 {
		t.Errorf("another org's images: %+v %v", other, err)
	}
	// The class images the backend tells come after the org's own.
	c.WithClasses(func() []catalog.ImageInfo {
		return []catalog.ImageInfo{{Name: "exec", Scope: "class", Class: "exec", Holds: "Python"}}
	})
	if list, err := c.Images(acme); err != nil || len(list) != 2 || list[0].Name != "tool" || list[1].Scope != "class" || list[1].Holds != "Python" {
		t.Errorf("images with the classes: %+v %v", list, err)
	}
	c.WithClasses(nil)
	if _, err := c.DeleteImage(org("globex"), "tool"); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("another org deletes it: %v", err)
	}
	if im, err := c.DeleteImage(acme, "tool"); err != nil || im.Name != "tool" {
		t.Errorf("delete: %+v %v", im, err)
	}

	sb, err := svc.Lease(acme, service.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Snapshot(acme, sb.ID, catalog.SnapshotRequest{Name: "snap"})
	if sandbox.KindOf(err) != sandbox.KindUnsupported || !strings.HasPrefix(err.Error(), "this server's fake backend cannot ") {
		t.Errorf("snapshot without a Differ: %v", err)
	}
	if _, err := c.Snapshot(org("globex"), sb.ID, catalog.SnapshotRequest{Name: "snap"}); sandbox.KindOf(err) != sandbox.KindNotFound {
		t.Errorf("another org's snapshot: %v", err)
	}

	none := catalog.New(catalog.Config{}, fs, usage.New(quota.Policy{}, st, st, &quota.Commands{}), st, lib, nil, "fake", nil)
	if _, err := none.PullImage(acme, catalog.ImageRequest{Name: "tool", Ref: "reg.example/team/x:1"}); sandbox.KindOf(err) != sandbox.KindForbidden || !strings.Contains(err.Error(), "--image-allow") {
		t.Errorf("no registry allowed: %v", err)
	}
}
