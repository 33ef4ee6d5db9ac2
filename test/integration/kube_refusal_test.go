package integration_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/server"
)

// refusalBound is how soon a lease the cluster refused must be answered:
// the scheduler says so within a second or two, and the start timeout of
// these servers is minutes (the backend's own bound, 2 minutes, is the one
// that holds), so an answer under it came from the scheduler, not a timer.
const refusalBound = 20 * time.Second

// newKubeEnvSlowStart is newKubeEnv whose starts may take minutes, and a
// count of the pods in its namespace; storageClass names the project
// volumes' StorageClass (empty: the cluster's default).
func newKubeEnvSlowStart(t *testing.T, storageClass string) (*env, func() int) {
	t.Helper()
	cfg := server.Config{}
	cfg.Service.StartTimeout = 5 * time.Minute
	cfg.Kube.StorageClass = storageClass
	cfg.Kube.RunnerImage = runnerImage(t)
	e, c, ns := newKubeEnvConfig(t, cfg)
	return e, func() int {
		t.Helper()
		// Every pod but the egress gateway's (the server's own, not a
		// sandbox's nor a neighbour's).
		l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name!=" + kube.GatewayName})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
}

// TestKubeUnboundClaim: a project lease whose claim no provisioner serves
// (a StorageClass the cluster does not have; its default one, local-path,
// would bind it) is answered at once with the cluster's reason and what is
// missing, leaves no pod, and is kept as an error row saying the same.
func TestKubeUnboundClaim(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e, pods := newKubeEnvSlowStart(t, "sbt-nobody-serves-this")
	start := time.Now()
	r := e.do("POST", "/v1/sandbox", "acme", map[string]any{"class": "dev", "project": "nopv", "ttlSec": 300})
	took := time.Since(start)
	msg, _ := r.JSON(t)["error"].(string)
	t.Logf("answered %d in %v: %s", r.Status, took.Round(time.Millisecond), msg)
	if r.Status != http.StatusServiceUnavailable || took > refusalBound || r.Header.Get("Retry-After") != "" ||
		!strings.HasPrefix(msg, "the sandbox could not be started: the cluster says: Unschedulable: ") ||
		!strings.Contains(msg, "unbound immediate PersistentVolumeClaims") || !strings.Contains(msg, `no provisioner serves StorageClass "sbt-nobody-serves-this"`) {
		t.Errorf("a project lease with no provisioner: %d after %v, Retry-After %q: %q", r.Status, took, r.Header.Get("Retry-After"), msg)
	}
	if n := pods(); n != 0 {
		t.Errorf("the refused lease left %d pods", n)
	}
	l, _ := e.must(http.StatusOK, "GET", "/v1/sandbox?status=error", "acme", nil).JSON(t)["sandboxes"].([]any)
	if len(l) != 1 {
		t.Fatalf("error rows: %v", l)
	}
	row := l[0].(map[string]any)
	if why, _ := row["error"].(string); !strings.Contains(why, "unbound immediate PersistentVolumeClaims") || !strings.Contains(msg, row["id"].(string)) {
		t.Errorf("the error row %v after %q", row, msg)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+row["id"].(string), "acme", nil)
}

// TestKubeDensityAndNoRoom: a pod requests what an idle sandbox uses, not
// what a busy one may, so the 2-core test node holds one org's whole exec
// cap (16) of idle exec sandboxes, each answering. Real shortage is still
// said as it was: with a neighbour workload taking the rest of the node's
// CPU, the first lease that does not fit is a 503 with Retry-After and the
// scheduler's "Insufficient cpu", answered at once, leaving no pod and no
// row; the room made, the retry succeeds.
func TestKubeDensityAndNoRoom(t *testing.T) {
	e, pods := newKubeEnvSlowStart(t, "")
	c, ns := kubeClient(t), e.cfg.Kube.Namespace
	ids := map[string][]string{}
	defer func() {
		for org, l := range ids {
			for _, id := range l {
				e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, org, nil)
			}
		}
		if n := pods(); n != 0 {
			t.Errorf("%d pods after every sandbox ended", n)
		}
	}()
	for range 16 {
		ids["acme"] = append(ids["acme"], e.lease("acme", map[string]any{"ttlSec": 600}))
	}
	for _, id := range ids["acme"] {
		if out := e.sh("acme", id, "echo up"); out != "up\n" {
			t.Fatalf("idle sandbox %s: %q", id, out)
		}
	}
	var st map[string]any
	st = e.must(http.StatusOK, "GET", "/v1/sandbox/"+ids["acme"][0]+"/stats", "acme", nil).JSON(t)
	t.Logf("16 idle exec sandboxes on the 2-core node; one uses %v bytes of memory by its own count", st["memoryBytes"])

	// A neighbour takes the node's CPU but for one exec pod's request.
	free := freeCPU(t, c)
	one := execPodCPU(t, c, ns)
	filler := neighbourPod(t, c, ns, free-one-one/2)
	defer c.CoreV1().Pods(ns).Delete(context.Background(), filler, metav1.DeleteOptions{})
	ids["globex"] = append(ids["globex"], e.lease("globex", map[string]any{"ttlSec": 600}))
	start := time.Now()
	refused := e.do("POST", "/v1/sandbox", "globex", map[string]any{"ttlSec": 600})
	took := time.Since(start)
	msg, _ := refused.JSON(t)["error"].(string)
	t.Logf("the lease past the node's room answered %d in %v, Retry-After %q: %s", refused.Status, took.Round(time.Millisecond), refused.Header.Get("Retry-After"), msg)
	if refused.Status != http.StatusServiceUnavailable || took > refusalBound || refused.Header.Get("Retry-After") != "10" ||
		!strings.HasPrefix(msg, "the cluster cannot place the sandbox now: ") || !strings.Contains(msg, "Insufficient cpu") || !strings.HasSuffix(msg, "; retry later") {
		t.Fatalf("the lease past the node's room: %d after %v, Retry-After %q: %q", refused.Status, took, refused.Header.Get("Retry-After"), msg)
	}
	if n := pods(); n != 17+1 {
		t.Errorf("%d pods for 17 sandboxes and the neighbour: the refused lease left its pod", n)
	}
	if l, _ := e.must(http.StatusOK, "GET", "/v1/sandbox", "globex", nil).JSON(t)["sandboxes"].([]any); len(l) != 1 {
		t.Errorf("%d rows for 1 sandbox: the refused lease left its row", len(l))
	}

	// Room made, the retry is placed.
	if err := c.CoreV1().Pods(ns).Delete(t.Context(), filler, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	id := e.lease("globex", map[string]any{"ttlSec": 600})
	ids["globex"] = append(ids["globex"], id)
	if out := e.sh("globex", id, "echo placed"); out != "placed\n" {
		t.Errorf("the retried sandbox: %q", out)
	}
}

// freeCPU is the test node's allocatable CPU less what its pods request,
// in millicores, as the scheduler counts it.
func freeCPU(t *testing.T, c kubernetes.Interface) int64 {
	t.Helper()
	nodes, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	node := nodes.Items[0]
	pl, err := c.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		t.Fatal(err)
	}
	used := int64(0)
	for _, p := range pl.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		used += podCPU(&p)
	}
	return node.Status.Allocatable.Cpu().MilliValue() - used
}

// podCPU is a pod's CPU request as the scheduler counts it: its
// containers' sum, or its largest init container if that is more.
func podCPU(p *corev1.Pod) int64 {
	sum, init := int64(0), int64(0)
	for _, c := range p.Spec.Containers {
		sum += c.Resources.Requests.Cpu().MilliValue()
	}
	for _, c := range p.Spec.InitContainers {
		init = max(init, c.Resources.Requests.Cpu().MilliValue())
	}
	return max(sum, init)
}

// execPodCPU is what one of the test's exec sandbox pods requests.
func execPodCPU(t *testing.T, c kubernetes.Interface, ns string) int64 {
	t.Helper()
	pl, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox})
	if err != nil || len(pl.Items) == 0 {
		t.Fatalf("sandbox pods: %v", err)
	}
	return podCPU(&pl.Items[0])
}

// neighbourPod starts a pod that is not a sandbox, requesting cpu millicores
// of the node, and waits until it is placed.
func neighbourPod(t *testing.T, c kubernetes.Interface, ns string, cpu int64) string {
	t.Helper()
	no := false
	p, err := c.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "neighbour-"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:sandbox-local", ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpu, resource.DecimalSI)}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		q, err := c.CoreV1().Pods(ns).Get(t.Context(), p.Name, metav1.GetOptions{})
		if err == nil && q.Spec.NodeName != "" {
			return p.Name
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the neighbour pod (%dm) was not placed", cpu)
	return ""
}
