// Package testenv decides whether a real-runtime test can run here. A plain
// `go test ./...` (no root, no runsc, no images, no cluster, no browser)
// runs every unit test and SKIPS each real-runtime suite with a message
// naming what is missing. scripts/test.sh (CI) sets SANDBOX_TEST_REQUIRE to
// the parts it installs (gvisor,browser,kube): there a missing part FAILS
// the test instead, so a suite can never skip silently in CI.
package testenv

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/image"
)

// Parts a real-runtime test may need, as SANDBOX_TEST_REQUIRE names them.
const (
	GVisor  = "gvisor"  // root, the pinned runsc and the built images
	Browser = "browser" // a real Chromium
	Kube    = "kube"    // a real cluster (SANDBOX_TEST_KUBECONFIG)
	Helm    = "helm"    // a real helm binary (SANDBOX_TEST_HELM)
	// KubeNodes is a second node in the test cluster, on this same machine
	// (KUBE_UP_NODE=2 scripts/kube-up.sh).
	KubeNodes = "kube-nodes"
)

// Required reports whether CI requires part to be here.
func Required(part string) bool {
	return slices.Contains(strings.Split(os.Getenv("SANDBOX_TEST_REQUIRE"), ","), part)
}

// Missing skips t, naming what is missing and how to get it, or fails it
// when CI requires part.
func Missing(t testing.TB, part, what string) {
	t.Helper()
	if Required(part) {
		t.Fatalf("%s (SANDBOX_TEST_REQUIRE=%s: scripts/test.sh requires every %s suite to run)", what, os.Getenv("SANDBOX_TEST_REQUIRE"), part)
	}
	t.Skipf("skipped, needs %s: %s (scripts/test.sh sets it up)", part, what)
}

// Images is where the tests read the built class images:
// SANDBOX_TEST_IMAGES, else image.DefaultDir.
func Images() string {
	if d := os.Getenv("SANDBOX_TEST_IMAGES"); d != "" {
		return d
	}
	return image.DefaultDir
}

// NeedGVisor skips (or fails, see Missing) unless the real gVisor runtime
// can run here: root, runsc (gvisor.DefaultRunsc, passed in so that the
// backend's own tests can use this), and every named image built.
func NeedGVisor(t testing.TB, runsc string, images ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, GVisor, "root (runsc creates sandboxes, cgroups and mounts)")
	}
	if _, err := os.Stat(runsc); err != nil {
		Missing(t, GVisor, "runsc at "+runsc+" (scripts/deps.sh builds it)")
	}
	for _, name := range images {
		if _, err := image.Rootfs(Images(), name); err != nil {
			Missing(t, GVisor, err.Error()+" (SANDBOX_TEST_IMAGES="+Images()+"; scripts/deps.sh builds it)")
		}
	}
}

// NeedBrowser answers the path of a real Chromium, or skips (fails).
func NeedBrowser(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		Missing(t, Browser, "chromium (Debian's package; scripts/deps.sh installs it for the tests)")
	}
	return p
}

// NeedKube answers the kubeconfig of a real cluster, or skips (fails).
func NeedKube(t testing.TB) string {
	t.Helper()
	k := os.Getenv("SANDBOX_TEST_KUBECONFIG")
	if k == "" {
		Missing(t, Kube, "a cluster: SANDBOX_TEST_KUBECONFIG (scripts/test.sh starts one with scripts/kube-up.sh)")
	}
	return k
}

// NeedHelm answers the path of a real helm (SANDBOX_TEST_HELM, which
// scripts/helm.sh builds), or skips (fails).
func NeedHelm(t testing.TB) string {
	t.Helper()
	h := os.Getenv("SANDBOX_TEST_HELM")
	if h == "" {
		Missing(t, Helm, "SANDBOX_TEST_HELM, a helm binary (scripts/helm.sh builds one)")
	}
	if st, err := os.Stat(h); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		Missing(t, Helm, "helm at SANDBOX_TEST_HELM="+h+" is not an executable file (scripts/helm.sh builds it)")
	}
	return h
}

// P50 is the median of latencies (zero for none), as the suites that
// compare a neighbour's latency with its idle value report it.
func P50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
