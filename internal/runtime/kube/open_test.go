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
