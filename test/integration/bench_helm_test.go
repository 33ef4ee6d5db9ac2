package integration_test

import (
	"net/http"
	"testing"
	"time"
)

// The chart on the test cluster, by real helm (SANDBOX_TEST_HELM), beside
// the host-run server on the same cluster:
//
//	SANDBOX_TEST_HELM=/var/lib/sandbox/kube/bin/helm \
//	SANDBOX_TEST_KUBECONFIG=/var/lib/sandbox/kube/etc/admin.kubeconfig \
//	  go test -run '^$' -bench 'HelmInstallUpgrade|HelmLease|KubeLease$' -benchtime 20x ./test/integration/
//
// HelmInstallUpgrade: helm install --wait until ready (install-s), then the
// API's downtime during a helm upgrade to a rebuilt image (downtime-ms,
// refused-req: a client polling /readyz and GET /v1/sandbox/{id} every
// 100 ms; the server is one replica on a ReadWriteOnce volume, so the
// upgrade is a Recreate: the old pod drains, then the new one starts). Each
// iteration is a release of its own, uninstalled after.
// HelmLease: POST /v1/sandbox until running through the in-cluster server's
// Service, against BenchmarkKubeLease, the host-run server's.

func BenchmarkHelmInstallUpgrade(b *testing.B) {
	images := newRelease(b)
	images.image("helm-a", "0.2.0+helm-a")
	images.image("helm-b", "0.2.0+helm-b")
	var install, down time.Duration
	var refused, n int
	for b.Loop() {
		r := newRelease(b)
		install += r.install("helm-a")
		e := r.env()
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		old := r.follow(r.serverPod().Name)
		p := poll(r.url(), id, e.keys["acme"])
		r.upgrade("helm-b")
		r.ready(r.url())
		d := p.end()
		down += d
		b.Logf("downtime %v; the old server: %s", d.Round(time.Millisecond), grepLines(old(), "drain"))
		refused += p.refused
		e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil)
		r.run("uninstall", "sandbox", "--wait", "--timeout", "2m")
		n++
	}
	b.ReportMetric(install.Seconds()/float64(n), "install-s")
	b.ReportMetric(float64(down.Milliseconds())/float64(n), "downtime-ms")
	b.ReportMetric(float64(refused)/float64(n), "refused-req")
}

func BenchmarkHelmLease(b *testing.B) {
	r := newRelease(b)
	r.image("helm-a", "0.2.0+helm-a")
	r.install("helm-a")
	e := r.env()
	measure(b, nil, func() func() { return e.leaseTimed(nil) })
}
