package kube

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// Scope is the namespace this server's sandboxes live in, and the label
// that marks them. It cannot be half-built: its fields are private, only
// NewScope makes one, and a zero Scope selects nothing (its methods fail).
// Every list, watch and delete goes through it, so no call reaches past the
// namespace or selects on anything broader than the sandbox label.
type Scope struct {
	ns string
}

// NewScope checks namespace: a DNS label, not a system namespace (default,
// kube-*) and not the server's own (its credentials live there).
func NewScope(namespace, serverNamespace string) (Scope, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return Scope{}, fmt.Errorf("namespace %q is not a valid name: %s", namespace, strings.Join(errs, "; "))
	}
	switch {
	case namespace == "default", strings.HasPrefix(namespace, "kube-"):
		return Scope{}, fmt.Errorf("namespace %q is a system namespace: sandboxes get a namespace of their own", namespace)
	case serverNamespace != "" && namespace == serverNamespace:
		return Scope{}, fmt.Errorf("namespace %q is the server's own: sandboxes must not share it with the server's credentials", namespace)
	}
	return Scope{ns: namespace}, nil
}

// Namespace is the sandboxes' namespace.
func (s Scope) Namespace() (string, error) {
	if s.ns == "" {
		return "", fmt.Errorf("kube: an unset scope selects nothing")
	}
	return s.ns, nil
}

// Selector is the label selector of a list: the sandbox label always (it
// exists on the object), and every label of extra.
func (s Scope) Selector(extra map[string]string) (string, error) {
	if s.ns == "" {
		return "", fmt.Errorf("kube: an unset scope selects nothing")
	}
	req, err := labels.NewRequirement(runtime.LabelSandbox, selection.Exists, nil)
	if err != nil {
		return "", err
	}
	sel := labels.NewSelector().Add(*req)
	for k, v := range extra {
		if v == "" {
			continue // "" means "any value": the Exists above covers the sandbox label
		}
		r, err := labels.NewRequirement(k, selection.Equals, []string{v})
		if err != nil {
			return "", fmt.Errorf("kube: label %s=%s: %w", k, v, err)
		}
		sel = sel.Add(*r)
	}
	return sel.String(), nil
}
