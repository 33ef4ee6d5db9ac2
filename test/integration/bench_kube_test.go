package integration_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// The kube backend beside client-go floors on the same cluster (no kubectl):
//
//	SANDBOX_TEST_KUBECONFIG=/var/lib/sandbox/kube/etc/admin.kubeconfig \
//	  go test -run '^$' -bench 'Kube' -benchtime 20x ./test/integration/
//
// Lease: POST /v1/sandbox until running, against creating a bare pod of the
// same image and RuntimeClass and polling it to Running. Exec: POST .../exec
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
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if p.Status.Phase == corev1.PodRunning {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
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

func BenchmarkKubeExecFloor(b *testing.B) {
	e, c, ns := newKubeEnv(b)
	id := e.lease("acme", nil)
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "sandbox.dev/id=" + id})
	if err != nil || len(pods.Items) != 1 {
		b.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("SANDBOX_TEST_KUBECONFIG"))
	if err != nil {
		b.Fatal(err)
	}
	u := c.CoreV1().RESTClient().Post().Resource("pods").Name(pods.Items[0].Name).Namespace(ns).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: []string{"true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	measure(b, nil, func() func() {
		ex, err := remotecommand.NewWebSocketExecutor(rc, "GET", u.String())
		if err != nil {
			b.Fatal(err)
		}
		if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			b.Fatal(err)
		}
		return nil
	})
}
