package quota

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// TestCommands: one count per org, bounded by the limit asked; a refusal
// counts nothing and is the 429 of the commands quota; a release frees
// its place once however often it is called, and an org with nothing
// running leaves no entry.
func TestCommands(t *testing.T) {
	var c Commands
	r1, err := c.Take("acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Take("acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Take("acme", 2)
	var e *sandbox.Error
	if !errors.As(err, &e) || e.Kind != sandbox.KindLimit || e.RetryAfter != RetryAfterCommand {
		t.Errorf("past the limit: %v", err)
	}
	if _, err := c.Take("globex", 1); err != nil || c.Running("acme") != 2 || c.Running("globex") != 1 || c.Orgs() != 2 {
		t.Errorf("another org: %v, acme %d, globex %d", err, c.Running("acme"), c.Running("globex"))
	}
	r1()
	r1()
	if n := c.Running("acme"); n != 1 {
		t.Errorf("after one release, twice: %d", n)
	}
	r2()
	if _, ok := c.org["acme"]; ok || c.Running("acme") != 0 {
		t.Errorf("an org with nothing running kept its entry: %v", c.org)
	}
	if _, err := c.Take("acme", 0); err == nil {
		t.Error("a zero quota admitted a command")
	}
}

type overrides map[string]Policy

func (o overrides) OrgQuota(_ context.Context, org string) (Policy, error) { return o[org], nil }

func TestInForceAndRefusal(t *testing.T) {
	five, two := 5, 2
	p, err := InForce(context.Background(), Policy{Commands: &five}, overrides{"acme": {Commands: &two}}, "acme")
	if err != nil || *p.Commands != 2 || *p.CPUs != *Default().CPUs {
		t.Errorf("acme: %+v %v", p, err)
	}
	if p, _ := InForce(context.Background(), Policy{Commands: &five}, nil, "acme"); *p.Commands != 5 {
		t.Errorf("no overrides: %+v", p)
	}
	for _, c := range []struct {
		err  error
		kind sandbox.Kind
	}{
		{&Exceeded{Quota: NameDiskMiB}, sandbox.KindQuota},
		{&Exceeded{Quota: NameProjects}, sandbox.KindQuota},
		{&Exceeded{Quota: NameCPUs}, sandbox.KindLimit},
		{&Exceeded{Quota: NameCommands}, sandbox.KindLimit},
	} {
		if got := Refusal(c.err); sandbox.KindOf(got) != c.kind {
			t.Errorf("%v: kind %v, want %v", c.err, sandbox.KindOf(got), c.kind)
		}
	}
	plain := errors.New("x")
	if Refusal(plain) != plain {
		t.Error("a plain error was changed")
	}
}
