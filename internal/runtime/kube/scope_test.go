package kube

import (
	"strings"
	"testing"
)

func TestScopeRefusesSystemNamespaces(t *testing.T) {
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "kube-anything", "sandbox-system", "", "Bad_Name"} {
		if _, err := NewScope(ns, "sandbox-system"); err == nil {
			t.Errorf("NewScope(%q) accepted", ns)
		}
	}
	s, err := NewScope("sandboxes", "sandbox-system")
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := s.Namespace(); err != nil || ns != "sandboxes" {
		t.Fatalf("namespace %q %v", ns, err)
	}
}

func TestZeroScopeSelectsNothing(t *testing.T) {
	var s Scope
	if _, err := s.Namespace(); err == nil {
		t.Error("a zero scope has a namespace")
	}
	if _, err := s.Selector(nil); err == nil {
		t.Error("a zero scope has a selector")
	}
}

func TestSelectorAlwaysHasTheSandboxLabel(t *testing.T) {
	s, _ := NewScope("sandboxes", "")
	sel, err := s.Selector(map[string]string{"sandbox.dev/org": "acme", "sandbox.dev/id": ""})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sel, "sandbox.dev/id") || !strings.Contains(sel, "sandbox.dev/org=acme") {
		t.Errorf("selector %q", sel)
	}
	if _, err := s.Selector(map[string]string{"bad key!": "x"}); err == nil {
		t.Error("an invalid label was accepted")
	}
}
