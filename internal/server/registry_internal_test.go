package server

import "testing"

// TestRegistryPullRef: an image of --image-push's registry is pulled by the
// nodes from --image-pull-host (the chart's registry: pushed to by its
// Service's name, pulled from each node's loopback); any other reference,
// or no pull host, is left as it is.
func TestRegistryPullRef(t *testing.T) {
	l := &registry{push: "sandbox-registry.sys.svc.cluster.local:5000/snapshots", pushHTTP: true, pullHost: "localhost:30500"}
	for ref, want := range map[string]string{
		"sandbox-registry.sys.svc.cluster.local:5000/snapshots@sha256:ab": "localhost:30500/snapshots@sha256:ab",
		"sandbox-registry.sys.svc.cluster.local:50000/x@sha256:ab":        "sandbox-registry.sys.svc.cluster.local:50000/x@sha256:ab",
		"10.99.255.10:5000/team/tool@sha256:ab":                           "10.99.255.10:5000/team/tool@sha256:ab",
	} {
		if got := l.pullRef(ref); got != want {
			t.Errorf("pullRef(%q) = %q, want %q", ref, got, want)
		}
	}
	if h := l.plainHTTP(); len(h) != 1 || h[0] != "sandbox-registry.sys.svc.cluster.local:5000" {
		t.Errorf("plainHTTP: %q", h)
	}
	l.pullHost, l.pushHTTP = "", false
	if got := l.pullRef("sandbox-registry.sys.svc.cluster.local:5000/snapshots@sha256:ab"); got != "sandbox-registry.sys.svc.cluster.local:5000/snapshots@sha256:ab" || l.plainHTTP() != nil {
		t.Errorf("without a pull host: %q %q", got, l.plainHTTP())
	}
}
