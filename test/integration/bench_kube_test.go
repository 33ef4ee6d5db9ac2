package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/server"
)

// The kube backend beside client-go floors on the same cluster (no kubectl):
//
//	SANDBOX_TEST_KUBECONFIG=/var/lib/sandbox/kube/etc/admin.kubeconfig \
//	  go test -run '^$' -bench 'Kube' -benchtime 20x ./test/integration/
//
// Lease: POST /v1/sandbox until running, against creating a bare pod of the
// same image and RuntimeClass and watching it to Running. Exec: POST .../exec
// {"argv":["true"]} against a raw exec-subresource round trip of `true`.

func BenchmarkKubeLease(b *testing.B) {
	e, _, _ := newKubeEnv(b)
	measure(b, nil, func() func() { return e.leaseTimed(nil) })
}

func BenchmarkKubeLeaseFloor(b *testing.B) {
	_, c, ns := newKubeEnv(b)
	ctx := context.Background()
	rc, no := "gvisor", false
	uid := int64(1000)
	measure(b, nil, func() func() {
		name := sandbox.NewName()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				RuntimeClassName: &rc, AutomountServiceAccountToken: &no, RestartPolicy: corev1.RestartPolicyNever,
				SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid},
				Containers: []corev1.Container{{Name: "c", Image: "sandbox/exec:local", ImagePullPolicy: corev1.PullNever,
					Command: []string{"sleep", "3600"}}},
			},
		}
		// Watched, not polled: the floor sees Running the moment the
		// apiserver does.
		w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				break
			}
		}
		w.Stop()
		return func() {
			grace := int64(0)
			c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}
	})
}

func BenchmarkKubeExec(b *testing.B) {
	e, _, _ := newKubeEnv(b)
	id := e.lease("acme", nil)
	measure(b, nil, func() func() {
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"argv": []string{"true"}})
		return nil
	})
}

// rawExec is a client-go exec-subresource call of argv in the pod of
// sandbox id, the floors' way in: the test's own config and URL, no server.
func rawExec(b *testing.B, c kubernetes.Interface, ns, id string, argv ...string) (*rest.Config, string) {
	b.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "sandbox.dev/id=" + id})
	if err != nil || len(pods.Items) != 1 {
		b.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("SANDBOX_TEST_KUBECONFIG"))
	if err != nil {
		b.Fatal(err)
	}
	u := c.CoreV1().RESTClient().Post().Resource("pods").Name(pods.Items[0].Name).Namespace(ns).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	return rc, u.String()
}

func BenchmarkKubeExecFloor(b *testing.B) {
	e, c, ns := newKubeEnv(b)
	id := e.lease("acme", nil)
	rc, u := rawExec(b, c, ns, id, "true")
	measure(b, nil, func() func() {
		ex, err := remotecommand.NewWebSocketExecutor(rc, "GET", u)
		if err != nil {
			b.Fatal(err)
		}
		if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			b.Fatal(err)
		}
		return nil
	})
}

// newKubeRunnerEnv is newKubeEnv whose pods carry the runner as their
// init (as the chart's are): processes and previews.
func newKubeRunnerEnv(b testing.TB) (*env, kubernetes.Interface, string) {
	cfg := server.Config{}
	cfg.Kube.RunnerImage = runnerImage(b)
	return newKubeEnvConfig(b, cfg)
}

// BenchmarkKubeProcessStart: POST .../processes {"argv":["true"]}, a
// background process started by the runner over one exec round trip; its
// floor is BenchmarkKubeExecFloor (a raw exec-subresource `true`).
func BenchmarkKubeProcessStart(b *testing.B) {
	e, _, _ := newKubeRunnerEnv(b)
	id := e.lease("acme", nil)
	measure(b, nil, func() func() {
		e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/processes", "acme", map[string]any{"argv": []string{"true"}})
		return nil
	})
}

// BenchmarkKubePreview: one GET of a small file through the path-form
// preview (a relay over exec per connection) from Python's http.server in
// the pod; BenchmarkKubePreviewFloor is the same GET made inside the pod.
func BenchmarkKubePreview(b *testing.B) {
	e, _, _ := newKubeRunnerEnv(b)
	id := previewTarget(b, e)
	url := e.http.URL + "/v1/sandbox/" + id + "/ports/8000/hello.txt"
	measure(b, nil, func() func() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("preview: %d", res.StatusCode)
		}
		return nil
	})
}

// BenchmarkKubePreviewFloor: the preview's GET made inside the pod, b.N
// of them timed there (Python's urllib on loopback, a new connection each,
// as the preview makes); reported as the p50 of one.
func BenchmarkKubePreviewFloor(b *testing.B) {
	e, _, _ := newKubeRunnerEnv(b)
	id := previewTarget(b, e)
	n := b.N
	b.ResetTimer()
	out := e.sh("acme", id, fmt.Sprintf(`python3 -c '
import time, urllib.request
ts = []
for _ in range(%d):
    t = time.perf_counter(); urllib.request.urlopen("http://127.0.0.1:8000/hello.txt").read(); ts.append(time.perf_counter() - t)
ts.sort(); print(ts[len(ts)//2] * 1000)'`, n))
	b.StopTimer()
	ms, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		b.Fatalf("the floor inside: %q", out)
	}
	b.ReportMetric(ms, "p50-ms")
}

// previewTarget leases a sandbox serving its workdir on port 8000.
func previewTarget(b testing.TB, e *env) string {
	id := e.lease("acme", nil)
	e.sh("acme", id, "echo hello > hello.txt")
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
	e.waitListening("acme", id, 8000)
	return id
}

// BenchmarkKubeFork: POST .../fork of an exec sandbox with a 1 MB file in
// its workdir, to the fork's answer: a new pod (the floor:
// BenchmarkKubeLeaseFloor, a bare pod to Running) and the workdir copied
// tar to tar between the two pods over two execs.
func BenchmarkKubeFork(b *testing.B) {
	e, _, _ := newKubeRunnerEnv(b)
	id := e.lease("acme", map[string]any{"ttlSec": 3600})
	e.sh("acme", id, "head -c 1000000 /dev/urandom > blob")
	measure(b, nil, func() func() {
		fork := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/fork", "acme", map[string]any{"ttlSec": 600}).JSON(b)["id"].(string)
		return func() { e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+fork, "acme", nil) }
	})
}

// BenchmarkKubeLeasePolicy: a lease with an egress policy on the cluster,
// the egress gateway running: with a domain policy (its pod carries the
// policy for the gateway; its NetworkPolicy names the gateway) against one
// of addresses only and one with none, in one run. The target is a domain
// policy at most 1.2× the lease without one.
func BenchmarkKubeLeasePolicy(b *testing.B) {
	cfg := server.Config{}
	cfg.Kube.RunnerImage = runnerImage(b)
	cfg.Service.NetworkAllow = []string{"*", "internet"}
	e, _, _ := newKubeEnvConfig(b, cfg)
	e.leaseTimed(map[string]any{"network": map[string]any{"allow": []string{"pypi.org"}}})() // the gateway ready
	for _, c := range []struct {
		name string
		net  map[string]any
	}{
		{"none", nil},
		{"cidr", map[string]any{"allow": []string{"203.0.113.0/24"}}},
		{"domains", map[string]any{"allow": []string{"pypi.org", "*.pythonhosted.org"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var body map[string]any
			if c.net != nil {
				body = map[string]any{"network": c.net}
			}
			measure(b, nil, func() func() { return e.leaseTimed(body) })
		})
	}
}

// BenchmarkKubeSnapshot: POST .../snapshot of a sandbox of a pulled image
// with 20 MB of changes, to the answer: the runner inside the pod reads the
// changes, the layer streams out over exec to the server, which pushes it
// to a registry. "floor" is the two transfers no snapshot can skip, raw: the
// same 20 MB read out of the pod by one exec-subresource `cat` (client-go)
// and pushed to the same registry as one blob (go-containerregistry).
func BenchmarkKubeSnapshot(b *testing.B) {
	r := newKubeSnapshotRig(b, "team/benchsnap:1", 3600)
	e, c, ns, reg, id := r.e, r.c, r.ns, r.reg, r.id
	e.sh("acme", id, "busybox head -c 20000000 /dev/urandom > /app/blob")

	b.Run("snapshot", func(b *testing.B) {
		measure(b, nil, func() func() {
			e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": "snap"})
			return func() { e.must(http.StatusOK, "DELETE", "/v1/images/snap", "acme", nil) }
		})
	})
	b.Run("floor", func(b *testing.B) {
		rc, u := rawExec(b, c, ns, id, "cat", "/app/blob")
		repo, err := name.NewRepository(reg.Host + "/floor")
		if err != nil {
			b.Fatal(err)
		}
		measure(b, nil, func() func() {
			ex, err := remotecommand.NewWebSocketExecutor(rc, "GET", u)
			if err != nil {
				b.Fatal(err)
			}
			var blob bytes.Buffer
			if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &blob, Stderr: io.Discard}); err != nil || blob.Len() != 20000000 {
				b.Fatalf("exec cat: %d bytes, %v", blob.Len(), err)
			}
			layer := static.NewLayer(blob.Bytes(), types.OCIUncompressedLayer)
			if err := remote.WriteLayer(repo, layer); err != nil {
				b.Fatal(err)
			}
			return nil
		})
	})
}
