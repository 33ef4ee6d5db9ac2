package kube

import (
	"strings"
	"testing"
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

// TestOptionsRegistry: the push registry's companions need it, and each
// is checked for what it is.
func TestOptionsRegistry(t *testing.T) {
	base := Options{Namespace: "sandboxes", RuntimeClass: "gvisor"}
	for _, c := range []struct {
		o  func(*Options)
		ok bool
	}{
		{func(o *Options) {
			o.PushRepo = "reg.sys.svc:5000/snapshots"
			o.PushHTTP = true
			o.PullHost = "localhost:30500"
		}, true},
		{func(o *Options) { o.PushHTTP = true }, false},
		{func(o *Options) { o.PullHost = "localhost:30500" }, false},
		{func(o *Options) { o.PushRepo = "Bad Repo" }, false},
		{func(o *Options) { o.PushRepo = "reg:5000/s"; o.PullHost = "localhost:30500/x" }, false},
	} {
		o := base
		c.o(&o)
		if err := o.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
