package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// release is one install of deploy/helm/sandbox on the test cluster, by
// real helm: the server in its own namespace, its sandboxes in another,
// both named for the test so that nothing else on the cluster is touched.
type release struct {
	t          testing.TB
	helm, kube string // the helm binary, the kubeconfig
	root       string // the test cluster's ROOT (kube-up.sh), for its images
	ns, sbns   string // the release's namespace, the sandboxes'
	c          kubernetes.Interface
	flags      []string // more --set flags of every install and upgrade
}

// newRelease names a release; nothing is installed yet. Its cleanup
// uninstalls it and deletes both namespaces, whatever the test did.
func newRelease(t testing.TB) *release {
	t.Helper()
	r := &release{t: t, helm: testenv.NeedHelm(t), kube: testenv.NeedKube(t), c: kubeClient(t)}
	r.root = os.Getenv("SANDBOX_TEST_KUBE_ROOT")
	if r.root == "" { // kube-up.sh's layout: ROOT/etc/admin.kubeconfig
		r.root = filepath.Dir(filepath.Dir(r.kube))
	}
	if _, err := os.Stat(filepath.Join(r.root, "bin", "imgtar")); err != nil {
		testenv.Missing(t, testenv.Kube, "the test cluster's ROOT with bin/imgtar (SANDBOX_TEST_KUBE_ROOT): "+err.Error())
	}
	r.ns = "sbt-helm-" + strings.ToLower(sandbox.NewID()[3:11])
	r.sbns = r.ns + "-sb"
	t.Cleanup(func() {
		// The keep-alive connections to the release's Service: no server
		// ends them here (an env's own httptest server closes its own).
		http.DefaultClient.CloseIdleConnections()
		clusterProbe.CloseIdleConnections()
		exec.Command(r.helm, "--kubeconfig", r.kube, "-n", r.ns, "uninstall", "sandbox", "--wait", "--timeout", "2m").Run()
		for _, n := range []string{r.sbns, r.ns} {
			r.c.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	return r
}

// run runs helm in the release's namespace and answers its output.
func (r *release) run(args ...string) string {
	r.t.Helper()
	cmd := exec.Command(r.helm, append([]string{"--kubeconfig", r.kube, "-n", r.ns}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// image builds the server image from this checkout with version stamped
// (scripts/server-image.sh) and imports it into the cluster as
// sandbox/server:TAG.
func (r *release) image(tag, version string) {
	r.t.Helper()
	cmd := exec.Command("bash", "../../scripts/server-image.sh", "-v", version, r.root, "sandbox/server:"+tag)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("server-image.sh: %v\n%s", err, out)
	}
}

// values are the --set flags of every install and upgrade: the images,
// never pulled (they are only on the node: the server's, and the chart's
// registry's, built from Debian's docker-registry), and the sandboxes'
// namespace.
func (r *release) values(tag string) []string {
	r.registryImage()
	return append([]string{"--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never", "--set", "sandboxNamespace.name=" + r.sbns,
		"--set", "registry.image.repository=sandbox/registry", "--set", "registry.image.tag=local", "--set", "registry.image.pullPolicy=Never"}, r.flags...)
}

var registryImageOnce sync.Once

// registryImage builds and imports the chart's registry image
// (scripts/registry-image.sh), once per test binary.
func (r *release) registryImage() {
	r.t.Helper()
	var out []byte
	var err error
	registryImageOnce.Do(func() {
		out, err = exec.Command("bash", "../../scripts/registry-image.sh", r.root, "sandbox/registry:local").CombinedOutput()
	})
	if err != nil {
		r.t.Fatalf("registry-image.sh: %v\n%s", err, out)
	}
}

// snapshotThroughChartRegistry: with the chart's own registry on (its
// default) and no --image-push of the operator's, a snapshot of a sandbox
// on a pulled image is pushed to the cluster's registry, and a lease of it
// runs on a pod the node pulled from the registry's ClusterIP, with the
// sandbox's changes to its root and workdir in it.
func snapshotThroughChartRegistry(t *testing.T, r *release, e *env, imageRef string) {
	// The node's containerd is told to speak plain HTTP to the registry's
	// address, as docs/kubernetes.md tells an operator to.
	svc, err := r.c.CoreV1().Services(r.ns).Get(t.Context(), "sandbox-registry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := svc.Spec.ClusterIP + ":5000"
	hosts := filepath.Join(r.root, "etc", "certs.d", addr)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hosts) })
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+addr, "http://"+addr)
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	e.must(http.StatusCreated, "POST", "/v1/images", "suite", map[string]string{"name": "chart-tool", "ref": imageRef})
	id := e.lease("suite", map[string]any{"image": "chart-tool", "ttlSec": 600})
	// Outside the workdir, where the sandbox's user may write: the test
	// image's /bin is that user's (testenv.PushBusybox).
	e.sh("suite", id, "echo from-the-root > /bin/snapnote && echo from-the-workdir > kept.txt")
	snap := e.do("POST", "/v1/sandbox/"+id+"/snapshot", "suite", map[string]any{"name": "chart-snap", "workdir": true})
	if snap.Status != http.StatusCreated {
		t.Fatalf("a snapshot with the chart's registry: %d %s", snap.Status, snap.Body)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "suite", nil)
	again := e.lease("suite", map[string]any{"image": "chart-snap", "ttlSec": 600})
	if out := e.sh("suite", again, "cat /bin/snapnote kept.txt"); out != "from-the-root\nfrom-the-workdir\n" {
		t.Errorf("a lease of the snapshot: %q", out)
	}
	pods, err := r.c.CoreV1().Pods(r.sbns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + again})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the snapshot's pod: %v %v", pods, err)
	}
	if img := pods.Items[0].Spec.Containers[0].Image; !strings.HasPrefix(img, addr+"/snapshots@sha256:") {
		t.Errorf("the snapshot's pod runs %q, not the chart registry's image by its address %s", img, addr)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+again, "suite", nil)
}

// install installs the chart and answers how long until a client of its
// Service is answered by /readyz: helm's --wait sees the Deployment
// available, and kube-proxy routes a new Service a moment after.
func (r *release) install(tag string) time.Duration {
	r.t.Helper()
	start := time.Now()
	r.run(append([]string{"install", "sandbox", "../../deploy/helm/sandbox", "--create-namespace", "--wait", "--timeout", "3m"}, r.values(tag)...)...)
	return r.ready(r.url()).Sub(start) // to the first 200 of the steady run
}

// upgrade upgrades the release to the image tag, waiting for it.
func (r *release) upgrade(tag string) {
	r.t.Helper()
	r.run(append([]string{"upgrade", "sandbox", "../../deploy/helm/sandbox", "--wait", "--timeout", "3m"}, r.values(tag)...)...)
}

// url is the server's Service, reached from the host through kube-proxy
// as any client in the cluster reaches it.
func (r *release) url() string {
	r.t.Helper()
	s, err := r.c.CoreV1().Services(r.ns).Get(context.Background(), "sandbox", metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return "http://" + s.Spec.ClusterIP + ":" + strconv.Itoa(int(s.Spec.Ports[0].Port))
}

// env is an env whose calls go to the in-cluster server, as the operator
// (its admin key, read from the chart's Secret) and as the tenants acme
// and suite (keys the operator mints).
func (r *release) env() *env {
	r.t.Helper()
	sec, err := r.c.CoreV1().Secrets(r.ns).Get(context.Background(), "sandbox-admin-key", metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	// data is what no answer may contain: the server's data directory is in
	// its pod, so only the runtime's names are checked for leaks here.
	e := &env{t: r.t, http: &httptest.Server{URL: r.url()}, data: "\x00no host data", keys: map[string]string{"system": string(sec.Data["key"])}}
	for _, org := range []string{"acme", "suite"} {
		k := e.must(http.StatusCreated, "POST", "/v1/orgs/"+org+"/keys", "system", map[string]any{"subject": "in-cluster tests"}).JSON(r.t)
		e.keys[org], _ = k["secret"].(string)
		if e.keys[org] == "" {
			r.t.Fatalf("no tenant key minted: %v", k)
		}
	}
	return e
}

// clusterProbe is the client of the calls that may meet a server that is not
// there: bounded in all (a request) and in its dial, which net/http
// otherwise lets run on past the request, for as long as the kernel
// retries a SYN to an address nobody serves.
// Each request on a connection of its own, as a new client would come:
// what a poll measures is the Service, not one old connection's fate.
var clusterProbe = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
	DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, DisableKeepAlives: true}}

// ready waits for the server behind the Service to answer /readyz, two
// seconds on end, and answers when that steady run began.
func (r *release) ready(url string) (first time.Time) {
	r.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	// Ready is ready for two seconds on end: right after a pod is killed
	// outright the Service's endpoints may still change under a first 200
	// (CI once saw a refused connection just after one).
	var since time.Time
	for {
		res, err := clusterProbe.Get(url + "/readyz")
		last := fmt.Sprint(err)
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				if since.IsZero() {
					since = time.Now()
				}
				if time.Since(since) >= 2*time.Second {
					return since
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			last = fmt.Sprintf("%d %s", res.StatusCode, b)
		}
		since = time.Time{}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s/readyz never answered 200 (last: %s)", url, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serverPod is the one server pod that is not terminating.
func (r *release) serverPod() corev1.Pod {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := r.c.CoreV1().Pods(r.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox"})
		if err != nil {
			r.t.Fatal(err)
		}
		var live []corev1.Pod
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		if len(live) == 1 {
			return live[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d live server pods", len(live))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logs is the server pod's log.
func (r *release) logs(pod string) string {
	r.t.Helper()
	b, err := r.c.CoreV1().Pods(r.ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b)
}

// follow streams a server pod's log until it ends; the answer is what it
// wrote so far (an upgrade's old pod is gone before anyone could ask).
func (r *release) follow(pod string) func() string {
	var mu sync.Mutex
	var buf bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	go func() {
		rc, err := r.c.CoreV1().Pods(r.ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			return
		}
		defer rc.Close()
		b := make([]byte, 4096)
		for {
			n, err := rc.Read(b)
			mu.Lock()
			buf.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

// poller asks /readyz and GET /v1/sandbox/{id} every 100 ms until stopped,
// counting the requests refused (an error, or not 200) and the span from
// the first refusal to the last answered one after it.
type poller struct {
	stop     chan struct{}
	done     chan struct{}
	asked    int
	refused  int
	firstBad time.Time
	lastBad  time.Time
}

func poll(url, id, key string) *poller {
	p := &poller{stop: make(chan struct{}), done: make(chan struct{})}
	ask := func(path string) bool {
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := clusterProbe.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			for _, path := range []string{"/readyz", "/v1/sandbox/" + id} {
				p.asked++
				if !ask(path) {
					p.refused++
					now := time.Now()
					if p.firstBad.IsZero() {
						p.firstBad = now
					}
					p.lastBad = now
				}
			}
		}
	}()
	return p
}

// end stops the poller and answers the downtime: first refusal to last,
// plus one period (0 if nothing was refused).
func (p *poller) end() time.Duration {
	close(p.stop)
	<-p.done
	if p.refused == 0 {
		return 0
	}
	return p.lastBad.Sub(p.firstBad) + 100*time.Millisecond
}

// world is what a server's restart must not lose: the tenant's leases, a
// file in each, and a command that runs on in one of them.
type world struct {
	leases map[string]map[string]any // id → its row as listed
	ticker string                    // the sandbox whose command writes /tmp/ticks
}

func leaseWorld(t *testing.T, e *env) world {
	t.Helper()
	w := world{leases: map[string]map[string]any{}}
	for _, body := range []map[string]any{
		{"class": "exec", "ttlSec": 1800},
		{"class": "dev", "project": "helmproj", "ttlSec": 1800},
		{"class": "desktop", "project": "helmdesk", "ttlSec": 1800},
	} {
		id := e.lease("acme", body)
		e.sh("acme", id, "echo kept-"+id+" > kept.txt")
		w.leases[id] = nil
		if body["class"] == "exec" {
			w.ticker = id
			// Runs on in the pod whatever happens to the server.
			e.sh("acme", id, "nohup sh -c 'while :; do date +%s >> /tmp/ticks; sleep 1; done' >/dev/null 2>&1 &")
		}
	}
	for _, s := range list(t, e) {
		w.leases[s["id"].(string)] = s
	}
	return w
}

func list(t *testing.T, e *env) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).JSON(t)["sandboxes"].([]any) {
		out = append(out, s.(map[string]any))
	}
	return out
}

// intact asserts w survived: the same leases with the same rows, each
// file, the command still ticking, and in the cluster exactly one pod per
// lease and the two projects' claims (no orphan, nothing lost).
func (r *release) intact(t *testing.T, e *env, w world, what string) {
	t.Helper()
	got := list(t, e)
	if len(got) != len(w.leases) {
		t.Errorf("%s: %d leases listed, want %d: %v", what, len(got), len(w.leases), got)
	}
	for _, s := range got {
		id := s["id"].(string)
		before, ok := w.leases[id]
		if !ok {
			t.Errorf("%s: a lease nobody made: %v", what, s)
			continue
		}
		for _, k := range []string{"status", "class", "expiresAt", "createdAt", "project"} {
			if fmt.Sprint(s[k]) != fmt.Sprint(before[k]) {
				t.Errorf("%s: %s's %s is %v, was %v", what, id, k, s[k], before[k])
			}
		}
		if got := e.sh("acme", id, "cat kept.txt"); got != "kept-"+id+"\n" {
			t.Errorf("%s: %s's file: %q", what, id, got)
		}
	}
	n := func() int {
		out := e.sh("acme", w.ticker, "wc -l < /tmp/ticks")
		v, _ := strconv.Atoi(strings.TrimSpace(out))
		return v
	}
	a := n()
	time.Sleep(2500 * time.Millisecond)
	if b := n(); b <= a {
		t.Errorf("%s: the long command stopped (%d ticks, then %d)", what, a, b)
	}
	ctx := context.Background()
	pods, err := r.c.CoreV1().Pods(r.sbns).List(ctx, metav1.ListOptions{LabelSelector: runtime.LabelSandbox})
	if err != nil {
		t.Fatal(err)
	}
	var live int
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live++
		}
	}
	if live != len(w.leases) {
		t.Errorf("%s: %d sandbox pods for %d leases", what, live, len(w.leases))
	}
	if pvcs, err := r.c.CoreV1().PersistentVolumeClaims(r.sbns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(pvcs.Items) != 2 {
		t.Errorf("%s: %d project claims, want 2", what, len(pvcs.Items))
	}
}

// version is the server's own account of its version (the OpenAPI
// document's info.version).
func version(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc struct {
		Info struct{ Version string } `json:"info"`
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc.Info.Version
}

// TestHelmInCluster installs the chart with real helm on the test cluster
// and holds the server it runs to what a team installing it expects:
//   - the pod becomes ready, and the Python SDK's suite passes against it
//     (its image pull from a registry in a network namespace of the test's)
//     through its Service;
//   - a helm upgrade to a rebuilt image (another version) loses no lease,
//     row or file, lets a call in flight finish, keeps a long command
//     running, and the next pod adopts every sandbox with none orphaned;
//   - so does the server pod killed outright (--grace-period=0 --force);
//   - helm uninstall leaves no sandbox pod, claim, volume or RBAC behind.
func TestHelmInCluster(t *testing.T) {
	t.Parallel() // see parallel_test.go
	r := newRelease(t)
	// A registry the server's pod and the node both reach (in a network
	// namespace of the test's, routed from the pods): the SDK pulls an
	// image from it.
	reg := testenv.NewRoutedInternet(t).Registry(t, r.root)
	r.flags = []string{"--set", "server.flags.image-allow=" + reg.Host}
	imageRef := reg.PushBusybox(t, "sdk/tool:1", map[string]string{"etc/greeting": "hi from the image\n"})
	r.image("helm-a", "0.2.0+helm-a")
	took := r.install("helm-a")
	t.Logf("helm install → ready in %v", took.Round(time.Millisecond))
	// The server made its egress gateway beside the sandboxes, with no
	// more than the chart's Role lets it.
	if d, err := r.c.AppsV1().Deployments(r.sbns).Get(context.Background(), kube.GatewayName, metav1.GetOptions{}); err != nil {
		t.Errorf("the egress gateway: %v", err)
	} else if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, "sandbox/server:") {
		t.Errorf("the egress gateway runs %q, not the server's image", img)
	}
	url := r.url()
	e := r.env()
	if v := version(t, url); v != "0.2.0+helm-a" {
		t.Fatalf("the installed server says it is %q", v)
	}

	t.Run("python-suite", func(t *testing.T) {
		py := testenv.PythonSDK(t, "../../sdk/python")
		cmd := exec.Command(py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "../../sdk/python/tests")
		cmd.Env = append(os.Environ(), "SANDBOX_URL="+url, "SANDBOX_KEY="+e.keys["suite"], "PYTHONDONTWRITEBYTECODE=1",
			"SANDBOX_TEST_IMAGE_REF="+imageRef)
		out, err := cmd.CombinedOutput()
		t.Logf("pytest against %s:\n%s", url, out)
		if err != nil {
			t.Fatalf("pytest: %v", err)
		}
		// The image cases ran (-rs lists what skipped, and why).
		if bytes.Contains(out, []byte("SANDBOX_TEST_IMAGE_REF")) {
			t.Errorf("the SDK's image cases skipped with a registry given")
		}
	})
	t.Run("js-suite", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			testenv.Missing(t, testenv.GVisor, "node (scripts/deps.sh installs nodejs for the tests)")
		}
		args := []string{"--test", "../../sdk/js/test/"}
		if exec.Command(node, "-e", "process.exit(typeof WebSocket === 'undefined' ? 1 : 0)").Run() != nil {
			args = append([]string{"--experimental-websocket"}, args...)
		}
		cmd := exec.Command(node, args...)
		cmd.Env = append(os.Environ(), "SANDBOX_URL="+url, "SANDBOX_KEY="+e.keys["suite"], "NODE_NO_WARNINGS=1",
			"SANDBOX_TEST_IMAGE_REF="+imageRef)
		out, err := cmd.CombinedOutput()
		t.Logf("node --test against %s:\n%s", url, out)
		if err != nil {
			t.Fatalf("node --test: %v", err)
		}
		if bytes.Contains(out, []byte("SANDBOX_TEST_IMAGE_REF is unset")) {
			t.Errorf("the SDK's image cases skipped with a registry given")
		}
	})
	t.Run("snapshot-in-cluster-registry", func(t *testing.T) {
		snapshotThroughChartRegistry(t, r, e, imageRef)
	})
	// What the suite left running (a sandbox a test leaves to its TTL) is
	// ended, so that the cluster holds the leases below and nothing else.
	for _, s := range e.must(http.StatusOK, "GET", "/v1/sandbox", "suite", nil).JSON(t)["sandboxes"].([]any) {
		id := s.(map[string]any)["id"].(string)
		t.Logf("the suite left %s (%v): ended", id, s.(map[string]any)["status"])
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "suite", nil)
	}

	w := leaseWorld(t, e)
	first := r.serverPod()

	// The upgrade, with a call in flight and a client polling.
	r.image("helm-b", "0.2.0+helm-b")
	inflight := make(chan execAnswer, 1)
	go func() {
		defer close(inflight)
		body, _ := json.Marshal(map[string]any{"command": "sleep 15; echo finished", "timeoutSec": 60})
		req, _ := http.NewRequest("POST", url+"/v1/sandbox/"+w.ticker+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer res.Body.Close()
		var a execAnswer
		if res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&a) == nil {
			inflight <- a
		}
	}()
	time.Sleep(time.Second) // the exec is in the server's hands
	old := r.follow(first.Name)
	p := poll(url, w.ticker, e.keys["acme"])
	r.upgrade("helm-b")
	r.ready(url)
	down := p.end()
	t.Logf("helm upgrade: %d of %d polled requests refused, downtime %v; the old server: %s", p.refused, p.asked, down.Round(time.Millisecond),
		grepLines(old(), "drain"))
	if a, ok := <-inflight; !ok || a.ExitCode != 0 || a.Stdout != "finished\n" {
		t.Errorf("the exec in flight at the upgrade: %+v (answered: %v)", a, ok)
	}
	// It was in flight when the old server was told to go: its drain
	// waited for it (with nothing in flight a drain takes under 1 ms).
	if d := drainTook(old()); d < time.Second {
		t.Errorf("the old server drained in %v: the exec was not in flight at its SIGTERM", d)
	}
	if v := version(t, url); v != "0.2.0+helm-b" {
		t.Errorf("after the upgrade the server says it is %q", v)
	}
	second := r.serverPod()
	if second.Name == first.Name {
		t.Fatalf("the upgrade kept pod %s", first.Name)
	}
	r.intact(t, e, w, "after helm upgrade")
	if l := r.logs(second.Name); !strings.Contains(l, fmt.Sprintf(" adopted=%d lost=0 ", len(w.leases))) {
		t.Errorf("the upgraded server's recovery: %s", grepLines(l, "recovered"))
	}

	// Killed outright: the Deployment replaces it, and it adopts them all.
	zero := int64(0)
	if err := r.c.CoreV1().Pods(r.ns).Delete(context.Background(), second.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	third := r.serverPod()
	for third.Name == second.Name {
		time.Sleep(200 * time.Millisecond)
		third = r.serverPod()
	}
	r.ready(url)
	r.intact(t, e, w, "after the server pod was killed")
	if l := r.logs(third.Name); !strings.Contains(l, fmt.Sprintf(" adopted=%d lost=0 ", len(w.leases))) {
		t.Errorf("the replacement's recovery: %s", grepLines(l, "recovered"))
	}

	// Uninstall: nothing of the release or its sandboxes is left.
	var claimed []string
	pvs, err := r.c.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing: %v", err)
	}
	for _, pv := range pvs.Items {
		if c := pv.Spec.ClaimRef; c != nil && (c.Namespace == r.ns || c.Namespace == r.sbns) {
			claimed = append(claimed, pv.Name)
		}
	}
	if len(claimed) != 4 { // the server's data, the registry's, the two projects
		t.Errorf("volumes of the release before uninstall: %v", claimed)
	}
	r.run("uninstall", "sandbox", "--wait", "--timeout", "2m")
	gone(t, "the sandbox namespace", func() (bool, error) {
		_, err := r.c.CoreV1().Namespaces().Get(context.Background(), r.sbns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	gone(t, "the release's volumes", func() (bool, error) {
		pvs, err := r.c.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, pv := range pvs.Items {
			if slices.Contains(claimed, pv.Name) {
				return false, nil
			}
		}
		return true, nil
	})
	ctx := context.Background()
	if l, err := r.c.CoreV1().PersistentVolumeClaims(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		t.Errorf("claims left in %s: %d", r.ns, len(l.Items))
	}
	if l, err := r.c.CoreV1().ServiceAccounts(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=sandbox"}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		t.Errorf("service accounts left in %s: %d", r.ns, len(l.Items))
	}
	if l, err := r.c.CoreV1().Secrets(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		t.Errorf("secrets left in %s: %d", r.ns, len(l.Items))
	}
	if l, err := r.c.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				t.Errorf("pod left in %s: %s", r.ns, p.Name)
			}
		}
	}
	if l, err := r.c.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=sandbox"}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		t.Errorf("cluster role bindings left: %d", len(l.Items))
	}
}

// drainTook is the drain's duration a server logged ("drained took=…"),
// or -1.
func drainTook(log string) time.Duration {
	_, rest, ok := strings.Cut(grepLines(log, "msg=drained"), "took=")
	if !ok {
		return -1
	}
	d, err := time.ParseDuration(strings.Fields(rest)[0])
	if err != nil {
		return -1
	}
	return d
}

// gone waits up to two minutes for done.
func gone(t *testing.T, what string, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: still there after 2 min (%v)", what, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// grepLines is the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
