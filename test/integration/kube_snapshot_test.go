package integration_test

import (
	"archive/tar"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// runnerImage is the server image of this checkout, in the test
// cluster (testenv.RunnerImage): the pods' runner comes from it.
func runnerImage(t testing.TB) string { return testenv.RunnerImage(t) }

// TestKubeSnapshotRunnerAndLayer (issue 27 item 10): on Kubernetes the
// runner that reads a snapshot's changes runs from a volume the sandbox
// cannot write — filled by an init container of the server's image,
// mounted read-only — so a tenant that keeps writing its own program
// where the runner used to be copied (its /tmp) never has it run; and the
// layer pushed is the one the checks passed: a setuid bit and a FIFO the
// sandbox made are not in the image the nodes pull.
func TestKubeSnapshotRunnerAndLayer(t *testing.T) {
	t.Parallel() // see parallel_test.go
	rig := newKubeSnapshotRig(t, "team/kubesnap:1", 600)
	e, c, ns, reg, id, cfg := rig.e, rig.c, rig.ns, rig.reg, rig.id, rig.cfg

	// From the cluster's side: the runner's volume, filled by the server's
	// image, read-only in the sandbox's container.
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	p := pods.Items[0]
	if len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Image != cfg.Kube.RunnerImage {
		t.Errorf("init containers: %+v", p.Spec.InitContainers)
	}
	ro := false
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.MountPath == filepath.Dir(runtime.RunnerPath) {
			ro = m.ReadOnly
		}
	}
	if !ro {
		t.Errorf("the runner's volume is not read-only in the sandbox: %+v", p.Spec.Containers[0].VolumeMounts)
	}
	// From the tenant's side: the runner is there and cannot be replaced.
	if out := e.sh("acme", id, "busybox test -x "+runtime.RunnerPath+" && echo runner; echo x > "+runtime.RunnerPath+" 2>/dev/null || echo refused; busybox touch "+filepath.Dir(runtime.RunnerPath)+"/x 2>/dev/null || echo refused"); out != "runner\nrefused\nrefused\n" {
		t.Errorf("the tenant and the runner's volume: %q", out)
	}

	// The tenant keeps writing its own program where the runner used to be
	// copied before it was run, and makes a setuid file and a FIFO.
	e.sh("acme", id, `printf '#!/bin/sh\n: > /tmp/pwned\n' > /tmp/evil; busybox chmod 755 /tmp/evil
(while :; do cat /tmp/evil > /tmp/.sandbox-changes 2>/dev/null; done) </dev/null >/dev/null 2>&1 &
echo s > /app/suid && busybox chmod 4755 /app/suid && busybox mkfifo /app/fifo && echo ok > /app/plain`)
	r := e.do("POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": "snap"})
	if out := e.sh("acme", id, "test -e /tmp/pwned && echo PWNED; true"); out != "" {
		t.Errorf("the tenant's program ran as the runner: %q", out)
	}
	if r.Status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.Status, r.Body)
	}
	e.sh("acme", id, "busybox pkill -f sandbox-changes; true")

	// The image pushed: its last layer has the plain file, the setuid one
	// without its bit, and no FIFO.
	digest := r.JSON(t)["digest"].(string)
	repo, err := name.NewRepository(reg.Host + "/snapshots")
	if err != nil {
		t.Fatal(err)
	}
	tags, err := remote.List(repo)
	if err != nil || len(tags) != 1 {
		t.Fatalf("the snapshots repository (snapshot %s): %v %v", digest, tags, err)
	}
	img, err := remote.Image(repo.Tag(tags[0]))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) < 2 {
		t.Fatalf("layers: %d %v", len(layers), err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[strings.TrimSuffix(h.Name, "/")] = h
	}
	switch {
	case seen["app/plain"] == nil || seen["app/suid"] == nil:
		t.Errorf("the pushed layer lacks the sandbox's files: %v", keys(seen))
	case seen["app/suid"].Mode&0o6000 != 0:
		t.Errorf("the pushed layer keeps a setuid bit: %o", seen["app/suid"].Mode)
	case seen["app/fifo"] != nil:
		t.Errorf("the pushed layer keeps the FIFO: %+v", seen["app/fifo"])
	}
}

// kubeSnapshotRig is a kube server whose pods carry the runner and whose
// snapshots go to a registry of the test's, and a sandbox on it of a
// pulled busybox image (repo, pushed there) with an empty /app.
type kubeSnapshotRig struct {
	e   *env
	c   kubernetes.Interface
	ns  string
	reg *testenv.Registry
	cfg server.Config
	id  string
}

func newKubeSnapshotRig(t testing.TB, repo string, ttlSec int) kubeSnapshotRig {
	t.Helper()
	r := kubeSnapshotRig{reg: testenv.NeedRegistry(t, false)}
	r.cfg = server.Config{Images: imagesWithClasses(t)}
	r.cfg.Catalog.Allow = []string{r.reg.Host}
	r.cfg.Kube.PushRepo = r.reg.Host + "/snapshots"
	r.cfg.Kube.RunnerImage = runnerImage(t)
	r.e, r.c, r.ns = newKubeEnvConfig(t, r.cfg)
	ref := push(t, r.reg, repo, []string{"PATH=/bin"}, busyboxLayer(t), tarLayer(t, tarEntry{name: "app/", typ: tar.TypeDir}))
	r.e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "tool", "ref": ref})
	r.id = r.e.lease("acme", map[string]any{"image": "tool", "ttlSec": ttlSec})
	return r
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
