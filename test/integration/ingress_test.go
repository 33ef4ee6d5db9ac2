package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/chromedp/chromedp"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// The names the chart's Ingress serves in TestHelmIngress: nothing
// resolves them but the test's own clients, which send them to Traefik.
const (
	ingressAPIHost = "api.sbt.test"
	ingressDomain  = "preview.sbt.test"
)

// traefik deploys Traefik (built by scripts/traefik.sh into ROOT/bin,
// imported here as an image) in the release's namespace as the controller
// of an IngressClass of the test's own, watching that namespace alone,
// and answers the class and Traefik's Service address (reached from the
// host through kube-proxy, as a cloud's load balancer would reach it).
func (r *release) traefik() (class, addr string) {
	t := r.t
	t.Helper()
	bin := filepath.Join(r.root, "bin", "traefik")
	waitForBuild(t, bin, filepath.Join(r.root, "bin", ".traefik.building"), 20*time.Minute)
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, testenv.Kube, "Traefik in the test cluster's ROOT/bin (scripts/traefik.sh builds it): "+err.Error())
	}
	rootfs := filepath.Join(r.root, "images", "traefik-rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if exec.Command("cmp", "-s", bin, filepath.Join(rootfs, "traefik")).Run() != nil {
		if out, err := exec.Command("cp", "-p", bin, filepath.Join(rootfs, "traefik")).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	}
	if out, err := exec.Command("bash", "../../scripts/kube-image.sh", r.root, "sandbox/traefik:local", rootfs, "--", "/traefik").CombinedOutput(); err != nil {
		t.Fatalf("kube-image.sh: %v\n%s", err, out)
	}

	ctx := context.Background()
	class = r.ns + "-traefik"
	labels := map[string]string{"app": "traefik"}
	if _, err := r.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.c.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
		r.c.RbacV1().ClusterRoleBindings().Delete(context.Background(), class, metav1.DeleteOptions{})
		r.c.RbacV1().ClusterRoles().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := r.c.CoreV1().ServiceAccounts(r.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "traefik"}}, metav1.CreateOptions{})
	must("service account", err)
	// What Traefik's Kubernetes Ingress provider reads, and the status it
	// writes.
	_, err = r.c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: class}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "endpoints", "secrets", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.k8s.io", "extensions"}, Resources: []string{"ingresses", "ingressclasses"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.k8s.io", "extensions"}, Resources: []string{"ingresses/status"}, Verbs: []string{"update"}},
	}}, metav1.CreateOptions{})
	must("cluster role", err)
	_, err = r.c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: class},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: class},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "traefik", Namespace: r.ns}}}, metav1.CreateOptions{})
	must("cluster role binding", err)
	_, err = r.c.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: networkingv1.IngressClassSpec{Controller: "traefik.io/ingress-controller"}}, metav1.CreateOptions{})
	must("ingress class", err)
	no, yes, uid := false, true, int64(65532)
	_, err = r.c.AppsV1().Deployments(r.ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "traefik"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName: "traefik",
			Containers: []corev1.Container{{
				Name: "traefik", Image: "sandbox/traefik:local", ImagePullPolicy: corev1.PullNever, Command: []string{"/traefik"},
				Args: []string{
					"--entryPoints.web.address=:8000",
					// Event streams, consoles and previews' sockets are long:
					// no read timeout (Traefik 3's default is 60 s).
					"--entryPoints.web.transport.respondingTimeouts.readTimeout=0",
					"--providers.kubernetesIngress=true",
					"--providers.kubernetesIngress.ingressClass=" + class,
					"--providers.kubernetesIngress.namespaces=" + r.ns,
					"--ping=true", "--ping.entryPoint=web",
					"--log.level=INFO",
				},
				Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8000}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping", Port: intstr.FromInt32(8000)}},
					PeriodSeconds: 1},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem: &yes, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		}},
	}}, metav1.CreateOptions{})
	must("deployment", err)
	svc, err := r.c.CoreV1().Services(r.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "traefik"}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("web")}},
	}}, metav1.CreateOptions{})
	must("service", err)
	return class, svc.Spec.ClusterIP
}

// waitForBuild waits up to limit while marker names a live build of bin
// (scripts/test.sh builds Traefik beside the first suites on a fresh
// machine, or anew when its version changed); a build that ended without
// it leaves the caller to say so.
func waitForBuild(t testing.TB, bin, marker string, limit time.Duration) {
	t.Helper()
	deadline, logged := time.Now().Add(limit), false
	for time.Now().Before(deadline) {
		raw, err := os.ReadFile(marker)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
			return
		}
		if !logged {
			t.Logf("waiting for %s: its build (pid %d) is still running", bin, pid)
			logged = true
		}
		time.Sleep(2 * time.Second)
	}
}

// traefikState is Traefik's pods, their state and log, for a failure.
func (r *release) traefikState() string {
	var b strings.Builder
	pods, err := r.c.CoreV1().Pods(r.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=traefik"})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s %+v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s\n", c.Type, c.Status, c.Message)
		}
		logs, _ := r.c.CoreV1().Pods(r.ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		fmt.Fprintf(&b, "  log:\n%s\n", logs)
	}
	ev, _ := r.c.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{})
	for _, e := range ev.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, "traefik") {
			fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}

// viaIngress sends one request to Traefik at addr for host.
func viaIngress(t *testing.T, addr, host, path, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.Host = host
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := clusterProbe.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestHelmIngress: the chart's Ingress, installed with a preview domain,
// through a real ingress controller (Traefik, built from the module
// proxy) in the test cluster: the API host answers, a lease and a preview
// link are made through it, and a dev server inside the sandbox opens in a
// real Chromium on the previews' wildcard host — the page, its live-reload
// WebSocket through Traefik, the token dropped, the preview's credential
// never reaching the app.
func TestHelmIngress(t *testing.T) {
	t.Parallel() // see parallel_test.go
	r := newRelease(t)
	class, addr := r.traefik()
	r.flags = []string{"--set", "ingress.enabled=true", "--set", "ingress.className=" + class,
		"--set", "ingress.host=" + ingressAPIHost, "--set", "server.previewDomain=" + ingressDomain}
	r.image("ingress", "0.2.0+ingress")
	r.install("ingress")

	// Traefik picks the Ingress up (and its pod is ready) a moment later.
	var code int
	var body string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if code, body = viaIngress(t, addr, ingressAPIHost, "/readyz", ""); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API host through Traefik: %d %.300s\n%s", code, body, r.traefikState())
		}
	}
	if code, _ := viaIngress(t, addr, "other.sbt.test", "/readyz", ""); code != http.StatusNotFound {
		t.Errorf("a host the Ingress does not name: %d, want Traefik's 404", code)
	}

	// Every call of the tenant's goes through the ingress from here.
	e := r.env()
	e.http.URL, e.host = "http://"+addr, ingressAPIHost
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	if code, body := viaIngress(t, addr, ingressAPIHost, "/v1/sandbox/"+id, e.keys["acme"]); code != http.StatusOK || !strings.Contains(body, id) {
		t.Fatalf("GET the sandbox through the API host: %d %.300s", code, body)
	}
	e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", devServer}})
	e.waitListening("acme", id, 8000)
	link := e.previewLink("acme", id, 8000, 300)
	hostURL, _ := link["url"].(string)
	after := "http://8000-" + hostLabel(id) + "." + ingressDomain + "/"
	if !strings.HasPrefix(hostURL, after+"?preview_token=") {
		t.Fatalf("the link's host form through the ingress: %q, want %s?preview_token=…", hostURL, after)
	}

	// The browser resolves the test's names to Traefik, nothing else.
	ctx, cancel := browser(t, chromedp.Flag("host-resolver-rules", "MAP *.sbt.test "+addr+", MAP sbt.test "+addr))
	defer cancel()
	browsePreview(t, ctx, hostURL, after)
}
