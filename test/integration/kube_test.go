package integration_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// The kube suite runs the API against --runtime kube on a real cluster:
// scripts/test.sh brings one up (scripts/kube-up.sh), imports the images,
// and sets SANDBOX_TEST_KUBECONFIG.

// kubeClient is the test's own view of the cluster, to assert from its side.
func kubeClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	path := testenv.NeedKube(t)
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newKubeEnv is a server on the kube backend, in a fresh namespace (with
// the pods' service account) that is deleted afterwards.
func newKubeEnv(t testing.TB) (*env, kubernetes.Interface, string) {
	t.Helper()
	return newKubeEnvConfig(t, server.Config{})
}

// newKubeEnvConfig is newKubeEnv with parts of the configuration set.
func newKubeEnvConfig(t testing.TB, cfg server.Config) (*env, kubernetes.Interface, string) {
	t.Helper()
	c, ns := testenv.KubeNamespace(t) // deleted after e.close (cleanups run last-in first-out)
	cfg.Backend = server.BackendKube
	cfg.Kube.Kubeconfig, cfg.Kube.Namespace, cfg.Kube.RuntimeClass = os.Getenv("SANDBOX_TEST_KUBECONFIG"), ns, "gvisor"
	return newEnvConfig(t, cfg), c, ns
}

// TestKubeAPI: the API over pods — lease, exec, files, the interpreter, a
// timeout killed inside, stop, cross-org 404, end — and from the cluster's
// side: the RuntimeClass, no service-account token, the labels, the
// security context, the pod gone after end.
func TestKubeAPI(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e, c, ns := newKubeEnv(t)
	ctx := context.Background()
	id := e.lease("acme", map[string]any{"ttlSec": 300})

	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %v %v", id, pods, err)
	}
	p := pods.Items[0]
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %v", p.Spec.RuntimeClassName)
	}
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken || p.Spec.ServiceAccountName != "sandbox-pod" {
		t.Errorf("service account: %s, automount %v", p.Spec.ServiceAccountName, p.Spec.AutomountServiceAccountToken)
	}
	for _, v := range p.Spec.Volumes {
		if v.Projected != nil || v.Secret != nil {
			t.Errorf("pod mounts a token or secret: %+v", v)
		}
	}
	sc := p.Spec.Containers[0].SecurityContext
	if sc == nil || *sc.RunAsUser != 1000 || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("security context %+v, restart %s", sc, p.Spec.RestartPolicy)
	}
	if p.Labels[runtime.LabelOrg] != sandbox.Slug("acme") || p.Spec.Containers[0].Resources.Limits.Memory().Value() != 1<<30 {
		t.Errorf("labels %v, limits %v", p.Labels, p.Spec.Containers[0].Resources.Limits)
	}
	for _, env := range p.Spec.Containers[0].Env {
		if strings.Contains(strings.ToLower(env.Name), "token") || strings.Contains(env.Value, e.keys["acme"]) {
			t.Errorf("a credential in the pod's environment: %s", env.Name)
		}
	}

	// Deny-all, both ways, for every sandbox pod of the namespace.
	np, err := c.NetworkingV1().NetworkPolicies(ns).Get(ctx, "sandbox-isolation", metav1.GetOptions{})
	if err != nil || len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 ||
		len(np.Spec.PodSelector.MatchExpressions) != 1 || np.Spec.PodSelector.MatchExpressions[0].Key != runtime.LabelSandbox {
		t.Errorf("isolation policy: %+v %v", np, err)
	}

	if out := e.sh("acme", id, "id -u; cat /etc/hostname; ls /var/run/secrets/kubernetes.io 2>&1 || true; pwd"); !strings.HasPrefix(out, "1000\nsandbox\n") ||
		!strings.Contains(out, "No such file") || !strings.HasSuffix(out, "/mnt/data\n") {
		t.Errorf("inside the pod: %q", out)
	}
	if a := e.exec("acme", id, map[string]any{"argv": []string{"sh", "-c", "echo $FOO; cat; exit 3"}, "env": map[string]string{"FOO": "bar"}, "stdin": "in"}); a.ExitCode != 3 || a.Stdout != "bar\nin" {
		t.Errorf("exec: %+v", a)
	}
	bin := []byte{0x00, 0x0d, 0xff, 'x'}
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=d/b.bin", "acme", bin)
	if r := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=d/b.bin", "acme", nil); string(r.Body) != string(bin) {
		t.Errorf("fs round trip: %q", r.Body)
	}
	if a := e.code("acme", map[string]any{"language": "py", "session_id": id, "code": "open('k.txt','w').write('k')\nprint(6*7)"}); a.Stdout != "42\n" || len(a.Files) != 1 {
		t.Errorf("interpreter: %+v", a)
	}
	// A timeout kills the program inside the pod, not only the stream.
	if a := e.exec("acme", id, map[string]any{"command": "sleep 4321", "timeoutSec": 1}); a.ExitCode != 124 {
		t.Errorf("timeout: %+v", a)
	}
	time.Sleep(500 * time.Millisecond)
	if out := e.sh("acme", id, "ps -eo args | grep -c '^sleep 4321' || true"); out != "0\n" {
		t.Errorf("the timed-out program still runs: %q", out)
	}
	e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id, "globex", nil)
	e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/exec", "globex", map[string]any{"command": "true"})

	// Stats: the disk from df inside the pod; CPU, memory and processes
	// said to be unavailable on this backend, not made up.
	st := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/stats", "acme", nil).JSON(t)
	disk, _ := st["disk"].([]any)
	why, _ := st["unavailable"].(string)
	if len(disk) == 0 || st["cpuSeconds"] != nil || !strings.Contains(why, "does not report") {
		t.Errorf("stats on kube: %v", st)
	}

	// A terminal, over the exec subresource's TTY.
	tk, _ := e.ticketFor("acme", id, "terminal")
	k, _, err := e.dialTerm(t, id, tk, "")
	if err != nil {
		t.Fatal(err)
	}
	k.expectSize(33, 99)
	k.send(websocket.MessageBinary, "echo kube-$((6*7))\r")
	k.expect("kube-42")
	k.c.Close(websocket.StatusNormalClosure, "")

	// Background processes need the in-sandbox runner, which a server
	// without --runner-image does not give its pods: it says so (501),
	// leaving nothing behind.
	if r := e.do("POST", "/v1/sandbox/"+id+"/processes", "acme", map[string]any{"argv": []string{"true"}}); r.Status != http.StatusNotImplemented {
		t.Errorf("POST /processes on kube without the runner: %d %s", r.Status, r.Body)
	}
	if pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 1 {
		t.Errorf("pods after the refused process: %d %v", len(pods.Items), err)
	}

	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	if _, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after end: %v", err)
	}
}

// scratchSpec is a small exec pod of its own sandbox, for the tests that
// drive the runtime directly.
func scratchSpec() runtime.Spec {
	return runtime.Spec{
		Name: sandbox.NewName(), Labels: map[string]string{runtime.LabelSandbox: sandbox.NewID()},
		Image: "exec", Runtime: "gvisor", Workdir: "/mnt/data",
		Volume: runtime.Volume{Name: "scratch-x", Scratch: true, SizeMiB: 64}, CPUs: 0.5, MemoryMiB: 256,
	}
}

// TestKubeDeleteUIDPrecondition: a delete that names the UID of a pod that
// was since recreated under the same name is refused, and the new pod stays.
func TestKubeDeleteUIDPrecondition(t *testing.T) {
	e, c, ns := newKubeEnv(t)
	ctx := context.Background()
	spec := scratchSpec()
	first, err := e.srv.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Runtime.Delete(ctx, runtime.Ref{Name: first.Name, UID: first.UID}); err != nil {
		t.Fatal(err)
	}
	second, err := e.srv.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if second.UID == first.UID {
		t.Fatal("a recreated pod kept its UID")
	}
	if err := e.srv.Runtime.Delete(ctx, runtime.Ref{Name: first.Name, UID: first.UID}); !errors.Is(err, runtime.ErrConflict) {
		t.Errorf("delete with the old UID: %v, want ErrConflict", err)
	}
	if p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{}); err != nil || string(p.UID) != second.UID {
		t.Errorf("the recreated pod: %v", err)
	}
	if err := e.srv.Runtime.Delete(ctx, runtime.Ref{Name: second.Name, UID: second.UID}); err != nil {
		t.Error(err)
	}
	if err := e.srv.Runtime.Delete(ctx, runtime.Ref{Name: second.Name, UID: second.UID}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("deleting it again: %v, want ErrNotFound", err)
	}
}

// TestKubeStartFailure: a pod that cannot start is reported with the
// cluster's reason, answered 503, and left nowhere.
func TestKubeStartFailure(t *testing.T) {
	e, c, ns := newKubeEnv(t)
	ctx := context.Background()
	spec := runtime.Spec{
		Name: sandbox.NewName(), Labels: map[string]string{runtime.LabelSandbox: sandbox.NewID()},
		Image: "no-such-image", Runtime: "gvisor", Workdir: "/mnt/data",
		Volume: runtime.Volume{Name: "scratch-y", Scratch: true, SizeMiB: 64},
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	_, err := e.srv.Runtime.Create(cctx, spec)
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Errorf("start failure: %v (want the cluster's reason, ErrImageNeverPull)", err)
	}
	if pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(pods.Items) != 0 {
		t.Errorf("a failed start left %d pods", len(pods.Items))
	}
}

// projectClaim is the claim name the service gives (org, project).
func projectClaim(org, project string) string {
	sum := sha256.Sum256([]byte(org + "\x00" + project))
	return "project-" + hex.EncodeToString(sum[:20])
}

// TestKubeSweepAndVolumes: the orphan sweep works unchanged over pods (a
// labelled pod no row claims is deleted once older than the grace, and a
// claimed one is kept); a project volume is a PVC of the deterministic
// name that outlives its sandbox and goes with purge.
func TestKubeSweepAndVolumes(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e, c, ns := newKubeEnv(t)
	ctx := context.Background()

	// A project volume: the test provides the PersistentVolume the claim
	// binds to (the cluster has no provisioner).
	claim := projectClaim("acme", "proj")
	withProjectVolume(t, c, ns, "acme", "proj")
	id := e.lease("acme", map[string]any{"class": "dev", "project": "proj", "ttlSec": 300})
	e.sh("acme", id, "echo kept > note.txt")
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{}); err != nil {
		t.Fatalf("the project's claim %s after end: %v", claim, err)
	}
	id = e.lease("acme", map[string]any{"class": "dev", "project": "proj", "ttlSec": 300})
	if out := e.sh("acme", id, "cat note.txt; pwd"); out != "kept\n/work\n" {
		t.Errorf("the project volume did not come back: %q", out)
	}

	// tmux on kube: the session survives a disconnect (a closed terminal
	// kills its own command, not what it detached).
	tk, _ := e.ticketFor("acme", id, "terminal")
	k, _, err := e.dialTerm(t, id, tk, "work")
	if err != nil {
		t.Fatal(err)
	}
	k.send(websocket.MessageBinary, "MARK=kube-$((40+2)); echo set-$MARK\r")
	k.expect("set-kube-42")
	k.c.CloseNow()
	time.Sleep(time.Second) // the server notices and cancels the exec
	tk, _ = e.ticketFor("acme", id, "terminal")
	if k, _, err = e.dialTerm(t, id, tk, "work"); err != nil {
		t.Fatal(err)
	}
	k.send(websocket.MessageBinary, "echo again-$MARK\r")
	k.expect("again-kube-42")
	k.c.Close(websocket.StatusNormalClosure, "")

	// The sweep: an unclaimed labelled pod goes; the live sandbox stays.
	stray, err := e.srv.Runtime.Create(ctx, runtime.Spec{
		Name: sandbox.NewName(), Labels: map[string]string{runtime.LabelSandbox: sandbox.NewID()},
		Image: "exec", Runtime: "gvisor", Workdir: "/mnt/data",
		Volume: runtime.Volume{Name: "scratch-stray", Scratch: true, SizeMiB: 64}, CPUs: 0.5, MemoryMiB: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Reaper.Grace = time.Nanosecond
	n, err := e.srv.Reaper.Sweep(ctx)
	if err != nil || n != 1 {
		t.Errorf("sweep deleted %d, %v; want the one stray", n, err)
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, stray.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stray pod survived the sweep: %v", err)
	}
	e.sh("acme", id, "true") // the claimed one still runs

	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"?purge=1", "acme", nil)
	// The claim is deleted; the cluster lets go of it once no pod uses it
	// (the pvc-protection finalizer).
	var err2 error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err2 = c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{}); apierrors.IsNotFound(err2) {
			return
		}
	}
	t.Errorf("the claim after purge: %v", err2)
}

// withProjectVolume gives (org, project) a PersistentVolume its claim binds
// to: the test cluster has no provisioner.
func withProjectVolume(t *testing.T, c kubernetes.Interface, ns, org, project string) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	fs := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + project},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &fs,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: projectClaim(org, project)},
		},
	}
	if _, err := c.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{}) })
}

// TestKubeScreen: a desktop pod's display, started and relayed over a
// non-tty exec subresource stream: the VNC server's RFB handshake arrives
// intact; a second connection comes through the sandbox's relay, with no
// process of its own.
func TestKubeScreen(t *testing.T) {
	t.Parallel() // see parallel_test.go
	cfg := server.Config{}
	cfg.Kube.RunnerImage = testenv.RunnerImage(t) // as the chart runs it: with a relay
	e, c, ns := newKubeEnvConfig(t, cfg)
	withProjectVolume(t, c, ns, "acme", "desk")
	id := e.lease("acme", map[string]any{"class": "desktop", "project": "desk", "ttlSec": 300})
	_, ws, b := e.dialScreen(t, id)
	defer ws.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The client's half of the handshake goes through too: the server
	// answers with its security types.
	if err := ws.Write(ctx, websocket.MessageBinary, b[:12]); err != nil {
		t.Fatal(err)
	}
	if _, sec, err := ws.Read(ctx); err != nil || len(sec) < 2 || sec[0] == 0 {
		t.Fatalf("security types: %q %v", sec, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	e.screenWithoutProcess(t, id)
}

// TestKubeRefusesAMissingRuntimeClass: a server told to use a RuntimeClass
// the cluster does not have refuses to start, before any pod exists (a
// sandbox pod is never created on the node's default runc).
func TestKubeRefusesAMissingRuntimeClass(t *testing.T) {
	testenv.NeedKube(t)
	_, err := server.New(context.Background(), server.Config{Data: t.TempDir(), Backend: server.BackendKube, Kube: kube.Options{
		Kubeconfig: os.Getenv("SANDBOX_TEST_KUBECONFIG"), Namespace: "sbt-norc", RuntimeClass: "no-such-class",
	}}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `RuntimeClass "no-such-class" does not exist`) {
		t.Errorf("a server on a missing RuntimeClass: %v", err)
	}
}

// TestKubeImage: a pulled image on the cluster — recorded by digest, not
// unpacked here; the pod runs it by its pinned reference, pulled by the
// node from the registry; snapshot and private registries are refused
// clearly.
func TestKubeImage(t *testing.T) {
	t.Parallel() // see parallel_test.go
	reg := testenv.NeedRegistry(t, false)
	cfg := server.Config{Images: imagesWithClasses(t)}
	cfg.Catalog.Allow = []string{reg.Host}
	cfg.Kube.PushRepo = reg.Host + "/snapshots"
	cfg.Kube.RunnerImage = runnerImage(t)
	e, c, ns := newKubeEnvConfig(t, cfg)
	ref := push(t, reg, "team/kubetool:1", []string{"GREETING=from the image", "PATH=/bin"}, busyboxLayer(t),
		tarLayer(t, tarEntry{name: "app/", typ: tar.TypeDir}, tarEntry{name: "app/hello.sh", typ: tar.TypeReg, body: []byte("echo \"$GREETING\"\n")}))
	r := e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "tool", "ref": ref}).JSON(t)
	digest := r["digest"].(string)
	if rootfs, _ := filepath.Glob(filepath.Join(cfg.Images, "oci", "*", "rootfs")); len(rootfs) != 0 {
		t.Errorf("unpacked on the kube backend: %v", rootfs)
	}
	id := e.lease("acme", map[string]any{"image": "tool"})
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	if img := pods.Items[0].Spec.Containers[0].Image; img != reg.Host+"/team/kubetool@"+digest {
		t.Errorf("the pod's image: %s", img)
	}
	if out := e.sh("acme", id, "sh /app/hello.sh; id -u"); out != "from the image\n1000\n" {
		t.Errorf("in the pod: %q", out)
	}
	// A snapshot: what the pod changed (read by the runner, on the pod's
	// read-only runner volume) appended to its image and pushed where the cluster
	// pulls from; a lease of it has the change, and the image's files.
	e.sh("acme", id, "echo changed > /app/new.txt && mkdir -p /app/deep/er && echo d > /app/deep/er/f")
	snap := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": "snap"}).JSON(t)
	if snap["digest"] == digest {
		t.Fatalf("the snapshot is the image itself: %v", snap)
	}
	again := e.lease("acme", map[string]any{"image": "snap"})
	if out := e.sh("acme", again, "cat /app/new.txt /app/deep/er/f; sh /app/hello.sh"); out != "changed\nd\nfrom the image\n" {
		t.Errorf("a lease of the snapshot: %q", out)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+again, "acme", nil)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	// A class image is in no registry: its sandboxes cannot be saved here.
	cls := e.lease("acme", nil)
	e.must(http.StatusNotImplemented, "POST", "/v1/sandbox/"+cls+"/snapshot", "acme", map[string]any{"name": "cls"})
}

// TestKubePrivateImage: an image of a registry with basic auth — the
// credentials become the org's own imagePullSecret, the pod names it, the
// node pulls with it; nothing of them is in the pod's environment; another
// org with the same user gets a secret of its own.
func TestKubePrivateImage(t *testing.T) {
	reg := testenv.NeedRegistry(t, true)
	cfg := server.Config{Images: imagesWithClasses(t)}
	cfg.Catalog.Allow = []string{reg.Host}
	e, c, ns := newKubeEnvConfig(t, cfg)
	ref := push(t, reg, "team/private:1", []string{"PATH=/bin"}, busyboxLayer(t))
	e.must(http.StatusBadRequest, "POST", "/v1/images", "acme", map[string]string{"name": "p", "ref": ref})
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "p", "ref": ref, "username": reg.User, "password": reg.Password})
	id := e.lease("acme", map[string]any{"image": "p"})
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	p := pods.Items[0]
	if len(p.Spec.ImagePullSecrets) != 1 {
		t.Fatalf("imagePullSecrets: %v", p.Spec.ImagePullSecrets)
	}
	for _, env := range p.Spec.Containers[0].Env {
		if strings.Contains(env.Value, reg.Password) {
			t.Errorf("the registry password is in the pod's environment (%s)", env.Name)
		}
	}
	sec, err := c.CoreV1().Secrets(ns).Get(t.Context(), p.Spec.ImagePullSecrets[0].Name, metav1.GetOptions{})
	if err != nil || sec.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("the pull secret: %v %v", sec, err)
	}
	if out := e.sh("acme", id, "ls /bin/busybox; env | grep -c "+reg.Password+" || true"); out != "/bin/busybox\n0\n" {
		t.Errorf("in the pod: %q", out)
	}

	// Another org with the same registry user (a shared vendor account)
	// gets a secret of its own: neither org's pods pull with what the
	// other gave, which it could replace or revoke.
	e.must(http.StatusCreated, "POST", "/v1/images", "globex", map[string]string{"name": "p", "ref": ref, "username": reg.User, "password": reg.Password})
	gid := e.lease("globex", map[string]any{"image": "p"})
	gpods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + gid})
	if err != nil || len(gpods.Items) != 1 || len(gpods.Items[0].Spec.ImagePullSecrets) != 1 {
		t.Fatalf("globex's pods: %v %v", gpods, err)
	}
	gsec := gpods.Items[0].Spec.ImagePullSecrets[0].Name
	if gsec == sec.Name {
		t.Errorf("two orgs' pods pull with one secret, %s", gsec)
	}
	for org, name := range map[string]string{"acme": sec.Name, "globex": gsec} {
		s, err := c.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || s.Labels[runtime.LabelOrg] != sandbox.Slug(org) {
			t.Errorf("%s's pull secret %s: labels %v, %v", org, name, s.Labels, err)
		}
	}
	if out := e.sh("globex", gid, "ls /bin/busybox"); out != "/bin/busybox\n" {
		t.Errorf("in globex's pod: %q", out)
	}
	// acme's next pod still names acme's.
	id2 := e.lease("acme", map[string]any{"image": "p"})
	pods, err = c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id2})
	if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Spec.ImagePullSecrets) != 1 || pods.Items[0].Spec.ImagePullSecrets[0].Name != sec.Name {
		t.Errorf("acme's pod after globex's pull: %v %v", pods, err)
	}

	// A deleted image takes the org's pull secret with it once no other
	// image of the org pulls with it: a second name of the same ref keeps
	// it; the last one's delete drops it; the other org's stays.
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "p2", "ref": ref, "username": reg.User, "password": reg.Password})
	for _, sid := range []string{id, id2} {
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+sid, "acme", nil)
	}
	e.must(http.StatusOK, "DELETE", "/v1/images/p", "acme", nil)
	if _, err := c.CoreV1().Secrets(ns).Get(t.Context(), sec.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("acme's pull secret went with one of its two images: %v", err)
	}
	e.must(http.StatusOK, "DELETE", "/v1/images/p2", "acme", nil)
	if _, err := c.CoreV1().Secrets(ns).Get(t.Context(), sec.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("acme's pull secret after its last image was deleted: %v", err)
	}
	if _, err := c.CoreV1().Secrets(ns).Get(t.Context(), gsec, metav1.GetOptions{}); err != nil {
		t.Errorf("globex's pull secret went with acme's images: %v", err)
	}
	// Pulled again, the image has its secret again.
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "p", "ref": ref, "username": reg.User, "password": reg.Password})
	id3 := e.lease("acme", map[string]any{"image": "p"})
	if out := e.sh("acme", id3, "ls /bin/busybox"); out != "/bin/busybox\n" {
		t.Errorf("in acme's pod after a new pull: %q", out)
	}
}

// TestKubeDeleteWaitsForTheContainers: Delete returns once the pod's
// processes are gone from the node, not when its object leaves the
// apiserver (a forced delete, grace 0, does that first): an ended project
// sandbox must not write its volume beside the next lease's, nor hold the
// node's memory past its end.
func TestKubeDeleteWaitsForTheContainers(t *testing.T) {
	e, _, _ := newKubeEnv(t)
	ctx := context.Background()
	spec := scratchSpec()
	obj, err := e.srv.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.srv.Runtime.Delete(context.Background(), runtime.Ref{Name: obj.Name, UID: obj.UID}) })
	if len(podProcesses(t, obj.UID)) == 0 {
		t.Fatal("no process of the running pod found on the node: the check below could not fail")
	}
	start := time.Now()
	if err := e.srv.Runtime.Delete(ctx, runtime.Ref{Name: obj.Name, UID: obj.UID}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted in %v", time.Since(start))
	if left := podProcesses(t, obj.UID); len(left) != 0 {
		t.Fatalf("the deleted pod's processes still run on the node: %v", left)
	}
}

// podProcesses lists the node's processes in the cgroup of the pod uid
// (the kubelet's cgroupfs driver names it pod<uid>; gVisor's sandbox and
// gofer are in it, a runc container in a cgroup below it).
func podProcesses(t *testing.T, uid string) []string {
	t.Helper()
	files, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && (strings.Contains(string(b), "/pod"+uid+"/") || strings.Contains(string(b), "/pod"+uid+"\n")) {
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "comm"))
			out = append(out, filepath.Base(filepath.Dir(f))+":"+strings.TrimSpace(string(comm)))
		}
	}
	return out
}

// TestKubeExecOutOfTheAuditLog: with the runner, an exec's argv and
// environment (a caller's secrets, often) travel on its stdin, not in the
// exec URL that the apiserver's audit log records at every level; the
// command still gets its env, directory, argv and stdin. (A terminal's
// command stays in the URL: its stdin goes through the pod's line
// discipline.)
func TestKubeExecOutOfTheAuditLog(t *testing.T) {
	root := os.Getenv("SANDBOX_TEST_KUBE_ROOT")
	audit := filepath.Join(root, "logs", "audit.log")
	if _, err := os.Stat(audit); err != nil {
		testenv.Missing(t, testenv.Kube, "the test cluster's audit log (scripts/kube-up.sh writes it under SANDBOX_TEST_KUBE_ROOT): "+err.Error())
	}
	cfg := server.Config{}
	cfg.Kube.RunnerImage = runnerImage(t)
	e, _, _ := newKubeEnvConfig(t, cfg)
	id := e.lease("acme", nil)
	e.sh("acme", id, "mkdir -p sub")
	secret, word := "envsecret"+sandbox.NewID()[3:], "argvword"+sandbox.NewID()[3:]
	out := e.exec("acme", id, map[string]any{"argv": []string{"sh", "-c", `echo "$TOKEN $1"; pwd; cat`, "sh", word},
		"env": map[string]string{"TOKEN": secret}, "dir": "sub", "stdin": "in"})
	if out.ExitCode != 0 || out.Stdout != secret+" "+word+"\n/mnt/data/sub\nin" {
		t.Fatalf("the exec: %+v", out)
	}
	if out := e.exec("acme", id, map[string]any{"argv": []string{"no-such-program"}}); out.ExitCode != 127 {
		t.Errorf("a missing program: %+v", out)
	}
	// A terminal's command too: here the name of a tmux session (the
	// exec image has no tmux, which the terminal says).
	session := "termword" + sandbox.NewID()[3:]
	tk, _ := e.ticketFor("acme", id, "terminal")
	k, _, derr := e.dialTerm(t, id, tk, session)
	if derr != nil {
		t.Fatalf("the terminal: %v", derr)
	}
	k.expect("tmux is not installed")
	k.c.Close(websocket.StatusNormalClosure, "")
	// The pod's execs are in the audit log, their URIs whole (so the
	// check below can fail); the secret and the argv are nowhere in it.
	sb, err := e.srv.Store.Get(sandbox.WithPrincipal(t.Context(), sandbox.Principal{Org: "acme", Subject: "test"}), id)
	if err != nil {
		t.Fatal(err)
	}
	var log []byte
	seen := func() bool {
		for _, line := range bytes.Split(log, []byte("\n")) {
			if bytes.Contains(line, []byte("/pods/"+sb.Name+"/exec?command=")) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		log, _ = os.ReadFile(audit)
		if seen() || time.Now().After(deadline) {
			break
		}
	}
	if !seen() {
		t.Fatalf("no exec of pod %s in the audit log %s", sb.Name, audit)
	}
	for what, s := range map[string]string{"environment": secret, "argv": word, "terminal's argv": session} {
		if bytes.Contains(log, []byte(s)) {
			t.Errorf("the exec's %s is in the apiserver's audit log", what)
		}
	}
}
