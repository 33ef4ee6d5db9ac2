package testenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

var (
	runnerImageOnce sync.Once
	runnerImageRef  string
	runnerImageErr  error
)

// RunnerImage builds the server image from this checkout
// (scripts/server-image.sh, which holds the runner) and imports it into
// the test cluster, once per test binary: the pods' runner comes from it,
// as the chart's do.
func RunnerImage(t testing.TB) string {
	t.Helper()
	kc := NeedKube(t)
	runnerImageOnce.Do(func() {
		root := os.Getenv("SANDBOX_TEST_KUBE_ROOT")
		if root == "" { // kube-up.sh's layout: ROOT/etc/admin.kubeconfig
			root = filepath.Dir(filepath.Dir(kc))
		}
		repo, err := repoRoot()
		if err != nil {
			runnerImageErr = err
			return
		}
		ref := "sandbox/server:runner-test"
		out, err := exec.Command("bash", filepath.Join(repo, "scripts", "server-image.sh"), root, ref).CombinedOutput()
		if err != nil {
			runnerImageErr = errors.New("server-image.sh: " + err.Error() + "\n" + string(out))
			return
		}
		runnerImageRef = ref
	})
	if runnerImageErr != nil {
		t.Fatal(runnerImageErr)
	}
	return runnerImageRef
}

// KubeNamespace makes a namespace of the test's own on the test cluster,
// with the sandbox pods' service account (its token never mounted), and
// deletes it at the test's end.
func KubeNamespace(t testing.TB) (kubernetes.Interface, string) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", NeedKube(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "sbt-" + strings.ToLower(sandbox.NewID()[3:15])
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		utilnet.CloseIdleConnectionsFor(hc.Transport) // no connection outlives the test (goleak)
	})
	no := false
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-pod"}, AutomountServiceAccountToken: &no,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// ServeKube is Serve on the kube backend: a real `sandbox serve --runtime
// kube` on loopback whose sandboxes are gVisor pods of the test cluster, in
// a namespace of the test's own, the runner in every pod (as the chart
// runs it).
func ServeKube(t testing.TB, orgs []string) *Server {
	t.Helper()
	kc := NeedKube(t)
	image := RunnerImage(t)
	_, ns := KubeNamespace(t)
	return serve(t, "", Binaries(t), orgs, Images(), []string{"--runtime", "kube", "--kubeconfig", kc, "--namespace", ns,
		"--runtime-class", "gvisor", "--runner-image", image})
}
