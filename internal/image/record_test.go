package image

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"
)

// TestRecordKeepsEachOrgsAccess: two orgs pull one digest from private
// registries, each with its own secret (from another registry, for the
// second): each org's pods pull from its own reference with its own
// secret, and a pull with no secret, or the same one again, changes
// nothing.
func TestRecordKeepsEachOrgsAccess(t *testing.T) {
	dir := t.TempDir()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	dg, _ := img.Digest()
	ctx := context.Background()
	if _, err := Record(ctx, dir, img, "a.example/team/tool:1", "acme", "sandbox-pull-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(ctx, dir, img, "mirror.example/tool:1", "globex", "sandbox-pull-g"); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(ctx, dir, img, "mirror.example/tool:1", "initech", ""); err != nil {
		t.Fatal(err)
	}
	p, err := InspectPulled(dir, dg.String())
	if err != nil {
		t.Fatal(err)
	}
	// What the first record said of the image stays (a snapshot's Seeded,
	// its source) when another org's pull adds its access.
	p.Seeded = true
	if err := writePulled(dir, p); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(ctx, dir, img, "mirror.example/tool:2", "hooli2", ""); err != nil {
		t.Fatal(err)
	}
	if p, err = InspectPulled(dir, dg.String()); err != nil || !p.Seeded || p.Source != "a.example/team/tool:1" {
		t.Fatalf("after another org's pull: %+v %v", p, err)
	}
	delete(p.Access, "hooli2")
	for org, want := range map[string]Access{
		"acme":    {Pinned: "a.example/team/tool@" + dg.String(), Secret: "sandbox-pull-a"},
		"globex":  {Pinned: "mirror.example/tool@" + dg.String(), Secret: "sandbox-pull-g"},
		"initech": {Pinned: "mirror.example/tool@" + dg.String()}, // a public pull: its own reference, no secret
		"hooli":   {Pinned: "a.example/team/tool@" + dg.String()}, // never pulled it: the record's
	} {
		if got := p.AccessOf(org); got != want {
			t.Errorf("%s pulls with %+v, want %+v", org, got, want)
		}
	}
	if len(p.Access) != 3 {
		t.Errorf("access of %d orgs, want 3: %v", len(p.Access), p.Access)
	}
	// A record from before Access: its one secret is still used by an org
	// with none of its own.
	old := &Pulled{Pinned: "old.example/x@" + dg.String(), PullSecret: "sandbox-pull-old"}
	if got := old.AccessOf("acme"); got != (Access{Pinned: old.Pinned, Secret: "sandbox-pull-old"}) {
		t.Errorf("a record from before Access: %+v", got)
	}
}
