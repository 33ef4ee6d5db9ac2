package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o   Options
		bad string
	}{
		{Options{Namespace: "sandboxes", RuntimeClass: "gvisor"}, ""},
		{Options{Namespace: "sandboxes"}, "--runtime-class is required"},
		{Options{RuntimeClass: "gvisor"}, "--namespace is required"},
		{Options{Namespace: "kube-system", RuntimeClass: "gvisor"}, "kube-system"},
		{Options{Namespace: "sb", ServerNamespace: "sb", RuntimeClass: "gvisor"}, "sb"},
	} {
		err := tc.o.Validate()
		if (err == nil) != (tc.bad == "") || err != nil && !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.bad)
		}
	}
}

// TestOptionsRegistry: --image-push-resolve needs --image-push, which
// must be a repository.
func TestOptionsRegistry(t *testing.T) {
	base := Options{Namespace: "sandboxes", RuntimeClass: "gvisor"}
	for _, c := range []struct {
		o  func(*Options)
		ok bool
	}{
		{func(o *Options) { o.PushRepo = "reg.sys.svc:5000/snapshots"; o.PushResolve = true }, true},
		{func(o *Options) { o.PushResolve = true }, false},
		{func(o *Options) { o.PushRepo = "Bad Repo" }, false},
	} {
		o := base
		c.o(&o)
		if err := o.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestResolvePush: a name becomes its first IPv4 address, port and path
// kept; an address stays; a name that never resolves is an error at the
// deadline.
func TestResolvePush(t *testing.T) {
	lookup := func(_ context.Context, h string) ([]string, error) {
		if h == "reg.sys.svc.cluster.local" {
			return []string{"fd00::1", "10.96.7.7"}, nil
		}
		return nil, errors.New("no such host")
	}
	if got, err := ResolvePush(t.Context(), "reg.sys.svc.cluster.local:5000/snapshots", lookup); err != nil || got != "10.96.7.7:5000/snapshots" {
		t.Errorf("a name: %q %v", got, err)
	}
	if got, err := ResolvePush(t.Context(), "10.1.2.3:5000/snapshots", lookup); err != nil || got != "10.1.2.3:5000/snapshots" {
		t.Errorf("an address: %q %v", got, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := ResolvePush(ctx, "nowhere.invalid:5000/s", lookup); err == nil {
		t.Error("an unresolvable name resolved")
	}
}
