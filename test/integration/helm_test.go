package integration_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/testenv"
)

const chartDir = "../../deploy/helm/sandbox"

// helmRun runs the real helm and answers its stdout; stderr is in the
// failure.
func helmRun(t *testing.T, helm string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(helm, args...)
	// Its own caches and config: never the operator's repositories.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, errb.String(), out.String())
	}
	return out.String()
}

// writeValues writes a values file and answers its path.
func writeValues(t *testing.T, v string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fullValues turns on every optional part and sets every named value.
const fullValues = `
ingress:
  enabled: true
  host: sandbox.example.com
  className: nginx
  tls: [{secretName: sandbox-tls, hosts: [sandbox.example.com, "*.preview.example.com"]}]
server:
  previewDomain: preview.example.com
  debug: true
  storageClass: fast
  operatorOrg: ops
  issuerURL: https://sandbox.example.com
  flags:
    ceiling: 48h
    network-allow: [internet, "*.pypi.org"]
    public-previews: true
    quota-disk-mib: 1048576
    quota-cpus: 1.5
persistence: {keep: true, existingClaim: my-data}
adminKey: {existingSecret: my-key, existingSecretKey: token}
service: {type: NodePort, nodePort: 30080}
terminationGracePeriodSeconds: 60
runtimeClass: {create: false, name: gvisor-alt}
sandboxNamespace: {name: tenant-pods, podServiceAccount: pods}
`

// TestHelmLint: helm lint --strict is clean (no warning, no error) with
// the defaults and with every optional part on.
func TestHelmLint(t *testing.T) {
	helm := testenv.NeedHelm(t)
	for name, args := range map[string][]string{"defaults": nil, "full": {"-f", writeValues(t, fullValues)}} {
		out := helmRun(t, helm, append([]string{"lint", "--strict", chartDir}, args...)...)
		if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") || !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("%s: helm lint is not clean:\n%s", name, out)
		}
	}
}

// objects parses a multi-document YAML stream into objects.
func objects(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// rendered is a render of the chart, by kind and name.
type rendered struct {
	objs []*unstructured.Unstructured
}

func (r rendered) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

func (r rendered) has(kind, name string) bool {
	for _, o := range r.objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return true
		}
	}
	return false
}

func render(t *testing.T, helm, release, ns string, args ...string) rendered {
	t.Helper()
	return rendered{objects(t, helmRun(t, helm, append([]string{"template", release, chartDir, "-n", ns}, args...)...))}
}

// roleRules are deploy/kube/rbac.yaml's rules as they were before the
// chart: the least the server needs in the sandbox namespace.
var roleRules = []any{
	map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get", "list", "watch", "create", "delete", "patch"}},
	map[string]any{"apiGroups": []any{""}, "resources": []any{"pods/exec"}, "verbs": []any{"create", "get"}},
	map[string]any{"apiGroups": []any{""}, "resources": []any{"persistentvolumeclaims"}, "verbs": []any{"get", "list", "create", "delete"}},
	map[string]any{"apiGroups": []any{""}, "resources": []any{"events"}, "verbs": []any{"list"}},
	map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"create", "update", "delete"}},
	map[string]any{"apiGroups": []any{"networking.k8s.io"}, "resources": []any{"networkpolicies"}, "verbs": []any{"get", "create", "update", "delete"}},
	// The egress gateway, which the server makes and keeps.
	map[string]any{"apiGroups": []any{""}, "resources": []any{"serviceaccounts", "services"}, "verbs": []any{"get", "create", "update"}},
	map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "verbs": []any{"get", "create", "update"}},
	map[string]any{"apiGroups": []any{"rbac.authorization.k8s.io"}, "resources": []any{"roles", "rolebindings"}, "verbs": []any{"get", "create", "update"}},
}

// num is a number of a parsed object (sigs.k8s.io/yaml makes every number
// a float64); -1 when there is none.
func num(o map[string]any, path ...string) float64 {
	v, ok, _ := unstructured.NestedFieldNoCopy(o, path...)
	if !ok {
		return -1
	}
	switch n := v.(type) {
	case float64:
		return n
	case int64:
		return float64(n)
	}
	return -1
}

func str(o map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(o, path...)
	return s
}

func fieldOf(t *testing.T, o map[string]any, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(o, path...)
	if !ok || err != nil {
		t.Fatalf("no %s (%v) in %v", strings.Join(path, "."), err, o)
	}
	return v
}

// serveFlags is a FlagSet with every flag of `sandbox serve`: the server's
// (RegisterFlags) and the three of cmd/sandbox's serveConfig, which
// TestChartFlags finds in the binary's own -h.
func serveFlags() (*flag.FlagSet, *server.Config, *time.Duration) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	var cfg server.Config
	var grace time.Duration
	fs.String("listen", "127.0.0.1:8080", "")
	fs.Bool("debug", false, "")
	fs.DurationVar(&grace, "shutdown-grace", 25*time.Second, "")
	cfg.RegisterFlags(fs)
	return fs, &cfg, &grace
}

// checkServer holds the server Deployment to the chart's promises and
// answers its container's args.
func checkServer(t *testing.T, r rendered, name, ns string) []string {
	t.Helper()
	d := r.get(t, "Deployment", name).Object
	if got := d["metadata"].(map[string]any)["namespace"]; got != ns {
		t.Errorf("the Deployment is in %v, not %s", got, ns)
	}
	if n := num(d, "spec", "replicas"); n != 1 {
		t.Errorf("replicas %v: one server uses the store", n)
	}
	if s := str(d, "spec", "strategy", "type"); s != "Recreate" {
		t.Errorf("strategy %q: two servers would share the ReadWriteOnce store", s)
	}
	pod := fieldOf(t, d, "spec", "template", "spec").(map[string]any)
	if v, ok, _ := unstructured.NestedBool(pod, "enableServiceLinks"); !ok || v {
		t.Error("enableServiceLinks is not false")
	}
	psc := fieldOf(t, pod, "securityContext").(map[string]any)
	for k, want := range map[string]any{"runAsNonRoot": true, "runAsUser": int64(65532), "runAsGroup": int64(65532), "fsGroup": int64(65532)} {
		if got := psc[k]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pod securityContext.%s = %v, want %v", k, got, want)
		}
	}
	if s := str(psc, "seccompProfile", "type"); s != "RuntimeDefault" {
		t.Errorf("seccomp %q", s)
	}
	cs := fieldOf(t, pod, "containers").([]any)
	if len(cs) != 1 {
		t.Fatalf("%d containers", len(cs))
	}
	c := cs[0].(map[string]any)
	csc := fieldOf(t, c, "securityContext").(map[string]any)
	if csc["allowPrivilegeEscalation"] != false || csc["readOnlyRootFilesystem"] != true || csc["privileged"] == true {
		t.Errorf("container securityContext %v: want no escalation, a read-only root", csc)
	}
	if drop, _, _ := unstructured.NestedStringSlice(csc, "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("capabilities drop %v, want [ALL]", drop)
	}
	if add, _, _ := unstructured.NestedStringSlice(csc, "capabilities", "add"); len(add) > 0 {
		t.Errorf("capabilities add %v", add)
	}
	if p := str(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("liveness on %q", p)
	}
	if p := str(c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness on %q", p)
	}
	if _, ok, _ := unstructured.NestedMap(c, "resources", "requests"); !ok {
		t.Error("no resource requests")
	}
	if _, ok, _ := unstructured.NestedMap(c, "resources", "limits"); !ok {
		t.Error("no resource limits")
	}
	// The key is a file: no environment variable comes from a Secret.
	if _, ok := c["envFrom"]; ok {
		t.Error("envFrom in the server container")
	}
	env, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range env {
		if _, ok, _ := unstructured.NestedMap(e.(map[string]any), "valueFrom", "secretKeyRef"); ok {
			t.Errorf("an environment variable from a Secret: %v", e)
		}
	}
	mounts := map[string]string{}
	ms, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, m := range ms {
		mounts[str(m.(map[string]any), "name")] = str(m.(map[string]any), "mountPath")
	}
	vols := map[string]map[string]any{}
	vs, _, _ := unstructured.NestedSlice(pod, "volumes")
	for _, v := range vs {
		vols[str(v.(map[string]any), "name")] = v.(map[string]any)
	}
	if mounts["tmp"] != "/tmp" || vols["tmp"]["emptyDir"] == nil {
		t.Errorf("no emptyDir /tmp beside the read-only root: mounts %v", mounts)
	}
	if mounts["data"] != "/data" || vols["data"]["persistentVolumeClaim"] == nil {
		t.Errorf("no data volume at /data: mounts %v", mounts)
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %v: want serve first", args)
	}
	// The args are what `sandbox serve` takes: every flag known, and the
	// configuration valid as the server judges it.
	fs, cfg, grace := serveFlags()
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
		t.Fatalf("sandbox serve refuses the chart's args %q: %v (left %q)", args, err, fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the chart's server configuration is invalid: %v", err)
	}
	if cfg.Backend != "kube" || cfg.Data != "/data" || cfg.Kube.Kubeconfig != "" || cfg.Kube.ServerNamespace != ns {
		t.Errorf("backend %q, data %q, kubeconfig %q (want none: in-cluster), server namespace %q", cfg.Backend, cfg.Data, cfg.Kube.Kubeconfig, cfg.Kube.ServerNamespace)
	}
	if l := fs.Lookup("listen").Value.String(); l != "0.0.0.0:8080" {
		t.Errorf("listen %q", l)
	}
	tgps := num(pod, "terminationGracePeriodSeconds")
	if time.Duration(tgps)*time.Second <= *grace {
		t.Errorf("terminationGracePeriodSeconds %v is not above --shutdown-grace %v", tgps, *grace)
	}
	if cfg.BootstrapKeyFile != "" {
		dir := filepath.Dir(cfg.BootstrapKeyFile)
		var vol string
		for n, p := range mounts {
			if p == dir {
				vol = n
			}
		}
		if vol == "" || vols[vol]["secret"] == nil {
			t.Errorf("--bootstrap-key-file %s is not on a Secret volume (mounts %v)", cfg.BootstrapKeyFile, mounts)
		}
	}
	return args
}

// checkScope holds the cluster-wide and RBAC objects to least privilege:
// nothing cluster-wide but the sandbox Namespace and the RuntimeClass, the
// Role only in the sandbox namespace with exactly deploy/kube's rules.
func checkScope(t *testing.T, r rendered, release, ns, sandboxNS, serverSA string) {
	t.Helper()
	for _, o := range r.objs {
		switch o.GetKind() {
		case "Namespace":
			if o.GetName() != sandboxNS {
				t.Errorf("the chart makes the namespace %s", o.GetName())
			}
		case "RuntimeClass":
		case "ClusterRole", "ClusterRoleBinding":
			t.Errorf("cluster-wide RBAC: %s %s", o.GetKind(), o.GetName())
		default:
			if o.GetNamespace() == "" {
				t.Errorf("%s %s has no namespace", o.GetKind(), o.GetName())
			}
		}
		if o.GetKind() == "Role" || o.GetKind() == "RoleBinding" {
			if o.GetNamespace() != sandboxNS {
				t.Errorf("%s %s in %s, not the sandbox namespace %s", o.GetKind(), o.GetName(), o.GetNamespace(), sandboxNS)
			}
		}
	}
	var roles int
	for _, o := range r.objs {
		if o.GetKind() != "Role" {
			continue
		}
		roles++
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		if !reflect.DeepEqual(rules, roleRules) {
			got, _ := json.Marshal(rules)
			t.Errorf("the Role's rules are\n%s\nwant deploy/kube/rbac.yaml's exactly", got)
		}
	}
	if roles != 1 {
		t.Errorf("%d Roles", roles)
	}
	rb := r.get(t, "RoleBinding", release)
	subj, _, _ := unstructured.NestedSlice(rb.Object, "subjects")
	if len(subj) != 1 || str(subj[0].(map[string]any), "name") != serverSA || str(subj[0].(map[string]any), "namespace") != ns {
		t.Errorf("the RoleBinding binds %v, want the server's account %s/%s", subj, ns, serverSA)
	}
	if str(rb.Object, "roleRef", "kind") != "Role" {
		t.Errorf("the RoleBinding refers to a %s", str(rb.Object, "roleRef", "kind"))
	}
	if sa := r.get(t, "ServiceAccount", serverSA); sa.GetNamespace() != ns {
		t.Errorf("the server's account is in %s", sa.GetNamespace())
	}
}

// checkSandboxNamespace: the pods' account without a token, and the
// deny-all policy the server looks for (kube.IsolationPolicy), selecting
// every sandbox pod, both ways, with no rule.
func checkSandboxNamespace(t *testing.T, r rendered, sandboxNS, podSA string) {
	t.Helper()
	sa := r.get(t, "ServiceAccount", podSA)
	if v, ok, _ := unstructured.NestedBool(sa.Object, "automountServiceAccountToken"); sa.GetNamespace() != sandboxNS || !ok || v {
		t.Errorf("the pods' account %s/%s mounts its token (%v, %v)", sa.GetNamespace(), podSA, v, ok)
	}
	np := r.get(t, "NetworkPolicy", kube.IsolationPolicy)
	if np.GetNamespace() != sandboxNS {
		t.Errorf("the isolation policy is in %s", np.GetNamespace())
	}
	sel := fieldOf(t, np.Object, "spec", "podSelector").(map[string]any)
	want := map[string]any{"matchExpressions": []any{map[string]any{"key": runtime.LabelSandbox, "operator": "Exists"}}}
	if !reflect.DeepEqual(sel, want) {
		t.Errorf("the isolation policy selects %v, want %v (the server's)", sel, want)
	}
	if pt, _, _ := unstructured.NestedStringSlice(np.Object, "spec", "policyTypes"); !slices.Equal(pt, []string{"Ingress", "Egress"}) {
		t.Errorf("policy types %v", pt)
	}
	for _, k := range []string{"ingress", "egress"} {
		if _, ok, _ := unstructured.NestedFieldNoCopy(np.Object, "spec", k); ok {
			t.Errorf("the deny-all policy has %s rules", k)
		}
	}
	if !r.has("ResourceQuota", sandboxNS) || !r.has("LimitRange", sandboxNS) {
		t.Error("no ResourceQuota or LimitRange in the sandbox namespace")
	}
}

// TestHelmTemplate renders the chart with its defaults and with every
// optional part on, and holds the objects to the chart's promises.
func TestHelmTemplate(t *testing.T) {
	helm := testenv.NeedHelm(t)
	t.Run("defaults", func(t *testing.T) {
		r := render(t, helm, "sandbox", "sandbox-system")
		args := checkServer(t, r, "sandbox", "sandbox-system")
		checkScope(t, r, "sandbox", "sandbox-system", "sandboxes", "sandbox")
		checkSandboxNamespace(t, r, "sandboxes", "sandbox-pod")
		ns := r.get(t, "Namespace", "sandboxes")
		if l := ns.GetLabels(); l["pod-security.kubernetes.io/enforce"] != "baseline" || l["pod-security.kubernetes.io/warn"] != "restricted" {
			t.Errorf("the sandbox namespace's Pod Security labels: %v", l)
		}
		if rc := r.get(t, "RuntimeClass", "gvisor"); str(rc.Object, "handler") != "runsc" {
			t.Errorf("RuntimeClass handler %q", str(rc.Object, "handler"))
		}
		for _, want := range []string{"--runtime=kube", "--namespace=sandboxes", "--runtime-class=gvisor", "--data=/data",
			"--issuer-url=http://sandbox.sandbox-system.svc.cluster.local", "--shutdown-grace=25s", "--bootstrap-key-file=/etc/sandbox/admin-key/key", "--operator-org=system",
			"--runner-image=sandbox/server:" + server.Version} {
			if !slices.Contains(args, want) {
				t.Errorf("no %s in %q", want, args)
			}
		}
		d := r.get(t, "Deployment", "sandbox")
		pod := fieldOf(t, d.Object, "spec", "template", "spec").(map[string]any)
		if tg := num(pod, "terminationGracePeriodSeconds"); tg != 30 {
			t.Errorf("terminationGracePeriodSeconds %v", tg)
		}
		c := fieldOf(t, pod, "containers").([]any)[0].(map[string]any)
		if img := str(c, "image"); img != "sandbox/server:"+server.Version || str(c, "imagePullPolicy") != "IfNotPresent" {
			t.Errorf("image %q (%s), want sandbox/server:%s (the appVersion)", img, str(c, "imagePullPolicy"), server.Version)
		}
		// The generated key: a key the server takes, in the Secret the pod mounts.
		sec := r.get(t, "Secret", "sandbox-admin-key")
		raw, err := base64.StdEncoding.DecodeString(str(sec.Object, "data", "key"))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.CheckKeyFormat(string(raw)); err != nil {
			t.Errorf("the chart's key is not one the server takes: %v", err)
		}
		sum := sha256.Sum256(raw)
		if got := d.GetAnnotations(); got != nil {
			t.Errorf("annotations on the Deployment itself: %v", got)
		}
		ann, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "annotations")
		if ann["checksum/admin-key"] != hex.EncodeToString(sum[:]) {
			t.Errorf("the pod's checksum/admin-key %q is not the Secret's key's", ann["checksum/admin-key"])
		}
		if _, ok := sec.GetAnnotations()["helm.sh/resource-policy"]; ok {
			t.Error("the Secret is kept without persistence.keep")
		}
		pvc := r.get(t, "PersistentVolumeClaim", "sandbox-data")
		if _, ok := pvc.GetAnnotations()["helm.sh/resource-policy"]; ok {
			t.Error("the PVC is kept without persistence.keep")
		}
		if s := str(pvc.Object, "spec", "resources", "requests", "storage"); s != "10Gi" {
			t.Errorf("PVC size %q", s)
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(pvc.Object, "spec", "storageClassName"); ok {
			t.Error("the PVC names a StorageClass: want the cluster's default")
		}
		svc := r.get(t, "Service", "sandbox")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if str(svc.Object, "spec", "type") != "ClusterIP" || len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["port"]) != "80" || ports[0].(map[string]any)["targetPort"] != "http" {
			t.Errorf("Service %v", svc.Object["spec"])
		}
		if r.has("Ingress", "") {
			t.Error("an Ingress by default")
		}
	})
	t.Run("full", func(t *testing.T) {
		r := render(t, helm, "edge", "edge-system", "-f", writeValues(t, fullValues))
		args := checkServer(t, r, "edge-sandbox", "edge-system")
		checkScope(t, r, "edge-sandbox", "edge-system", "tenant-pods", "edge-sandbox")
		checkSandboxNamespace(t, r, "tenant-pods", "pods")
		// Every named value reaches its flag; server.flags follow, sorted,
		// a list repeating its flag, numbers as numbers.
		i := slices.Index(args, "--runtime-class=gvisor-alt")
		want := []string{"--namespace=tenant-pods", "--service-account=pods", "--issuer-url=https://sandbox.example.com", "--shutdown-grace=55s",
			"--operator-org=ops", "--bootstrap-key-file=/etc/sandbox/admin-key/key", "--preview-domain=preview.example.com", "--debug", "--storage-class=fast",
			// The chart's own registry (on by default), by its Service's address.
			"--image-push=edge-sandbox-registry.edge-system.svc.cluster.local:5000/snapshots", "--image-push-resolve"}
		for _, w := range want {
			if !slices.Contains(args, w) {
				t.Errorf("no %s in %q", w, args)
			}
		}
		tail := []string{"--ceiling=48h", "--network-allow=internet", "--network-allow=*.pypi.org", "--public-previews=true", "--quota-cpus=1.5", "--quota-disk-mib=1048576"}
		if i < 0 || !slices.Equal(args[len(args)-len(tail):], tail) {
			t.Errorf("args %q: want server.flags last as %q", args, tail)
		}
		if r.has("RuntimeClass", "") || r.has("Secret", "") || r.has("PersistentVolumeClaim", "edge-sandbox-data") {
			t.Error("a RuntimeClass, Secret or data PVC rendered with create off, an existing secret and an existing claim")
		}
		// The registry's pods are not the server Service's: its selector
		// would otherwise send API calls to the registry.
		reg := r.get(t, "Deployment", "edge-sandbox-registry")
		labels, _, _ := unstructured.NestedStringMap(reg.Object, "spec", "template", "metadata", "labels")
		sel, _, _ := unstructured.NestedStringMap(r.get(t, "Service", "edge-sandbox").Object, "spec", "selector")
		matches := len(sel) > 0
		for k, v := range sel {
			matches = matches && labels[k] == v
		}
		if matches || !r.has("Service", "edge-sandbox-registry") || !r.has("PersistentVolumeClaim", "edge-sandbox-registry") {
			t.Errorf("the registry: pod labels %v, the server's selector %v", labels, sel)
		}
		d := r.get(t, "Deployment", "edge-sandbox")
		pod := fieldOf(t, d.Object, "spec", "template", "spec").(map[string]any)
		vs, _, _ := unstructured.NestedSlice(pod, "volumes")
		var sawClaim, sawKey bool
		for _, v := range vs {
			v := v.(map[string]any)
			if str(v, "persistentVolumeClaim", "claimName") == "my-data" {
				sawClaim = true
			}
			if str(v, "secret", "secretName") == "my-key" {
				items, _, _ := unstructured.NestedSlice(v, "secret", "items")
				sawKey = len(items) == 1 && str(items[0].(map[string]any), "key") == "token" && str(items[0].(map[string]any), "path") == "key"
			}
		}
		if !sawClaim || !sawKey {
			t.Errorf("volumes %v: want the claim my-data and the key token of my-key as the file key", vs)
		}
		ing := r.get(t, "Ingress", "edge-sandbox")
		rules, _, _ := unstructured.NestedSlice(ing.Object, "spec", "rules")
		var hosts []string
		for _, rule := range rules {
			hosts = append(hosts, str(rule.(map[string]any), "host"))
		}
		if !slices.Equal(hosts, []string{"sandbox.example.com", "*.preview.example.com"}) || str(ing.Object, "spec", "ingressClassName") != "nginx" {
			t.Errorf("Ingress hosts %v", hosts)
		}
		svc := r.get(t, "Service", "edge-sandbox")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if str(svc.Object, "spec", "type") != "NodePort" || fmt.Sprint(ports[0].(map[string]any)["nodePort"]) != "30080" {
			t.Errorf("Service %v", svc.Object["spec"])
		}
	})
	t.Run("keep", func(t *testing.T) {
		r := render(t, helm, "sandbox", "sandbox-system", "--set", "persistence.keep=true")
		for _, o := range []*unstructured.Unstructured{r.get(t, "PersistentVolumeClaim", "sandbox-data"), r.get(t, "Secret", "sandbox-admin-key")} {
			if o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s %s is not kept with persistence.keep", o.GetKind(), o.GetName())
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		for name, set := range map[string]string{
			"named flag":          "server.flags.listen=1",
			"dashed flag":         "server.flags.--ceiling=1h",
			"sandboxes in server": "sandboxNamespace.name=sandbox-system",
			"grace":               "terminationGracePeriodSeconds=5",
			"ingress no host":     "ingress.enabled=true",
			"push with registry":  "server.flags.image-push=reg.example.com/snaps",
		} {
			cmd := exec.Command(helm, "template", "sandbox", chartDir, "-n", "sandbox-system", "--set", set)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir())
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("%s (--set %s) rendered", name, set)
			} else if !strings.Contains(string(out), "Error:") {
				t.Errorf("%s: %s", name, out)
			}
		}
	})
}

// TestChartFlags: every flag of `sandbox serve` (the binary's own -h) is
// rendered by a named value of the chart or documented under server.flags
// in values.yaml with its default and its help, so the chart cannot fall
// behind a new flag silently.
func TestChartFlags(t *testing.T) {
	t.Parallel() // see parallel_test.go
	bin := filepath.Join(t.TempDir(), "sandbox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sandbox")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	if len(names) < 40 {
		t.Fatalf("only %d flags in sandbox serve -h:\n%s", len(names), out)
	}
	// The flags the chart's named values render (templates/_helpers.tpl's
	// list): TestHelmTemplate sees each in the args.
	named := []string{"runtime", "namespace", "runtime-class", "data", "listen", "kubeconfig", "server-namespace", "service-account",
		"issuer-url", "shutdown-grace", "bootstrap-key-file", "operator-org", "preview-domain", "debug", "storage-class", "runner-image"}
	helpers, err := os.ReadFile(filepath.Join(chartDir, "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range named {
		if !strings.Contains(string(helpers), strconv.Quote(n)) {
			t.Errorf("%s is not in _helpers.tpl's list of named flags", n)
		}
	}
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The documented flags: "  #   NAME: DEFAULT" then its help on
	// "  #       ..." lines.
	doc := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(values), "\n") {
		if m := regexp.MustCompile(`^  #   ([a-z0-9-]+): (.*)$`).FindStringSubmatch(line); m != nil {
			cur = m[1]
			doc[cur] = m[2] + "\n"
		} else if h, ok := strings.CutPrefix(line, "  #       "); ok && cur != "" {
			doc[cur] += h + " "
		} else {
			cur = ""
		}
	}
	fs, _, _ := serveFlags()
	for _, n := range names {
		if slices.Contains(named, n) {
			if _, ok := doc[n]; ok {
				t.Errorf("%s is a named value and also documented under server.flags (where it is refused)", n)
			}
			continue
		}
		d, ok := doc[n]
		if !ok {
			t.Errorf("the flag --%s of sandbox serve is neither a named value of the chart nor documented under server.flags in values.yaml", n)
			continue
		}
		def, help, _ := strings.Cut(d, "\n")
		f := fs.Lookup(n)
		if f == nil {
			continue // a flag of serve's own the test's FlagSet lacks: its name is documented
		}
		// A default that depends on this machine (an env var, a file
		// beside the binary) is not compared.
		if !strings.Contains(f.Usage, "(env ") && n != "runner" && strings.Trim(def, `"`) != f.DefValue {
			t.Errorf("values.yaml documents --%s's default as %s, the server's is %q", n, def, f.DefValue)
		}
		words := strings.Fields(f.Usage)
		if len(words) > 6 {
			words = words[:6]
		}
		if !strings.Contains(strings.Join(strings.Fields(help), " "), strings.Join(words, " ")) {
			t.Errorf("values.yaml's help of --%s does not begin as the server's: %q", n, strings.Join(words, " "))
		}
	}
	for n := range doc {
		if !slices.Contains(names, n) {
			t.Errorf("values.yaml documents --%s, which sandbox serve does not have", n)
		}
	}
}

// TestChartRenderedKube: deploy/kube is scripts/render-kube.sh's output of
// the chart as it is now.
func TestChartRenderedKube(t *testing.T) {
	helm := testenv.NeedHelm(t)
	out := t.TempDir()
	cmd := exec.Command("bash", "scripts/render-kube.sh", out)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "HELM="+helm, "HELM_CACHE_HOME="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render-kube.sh: %v\n%s", err, b)
	}
	fresh, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	checked, _ := filepath.Glob("../../deploy/kube/*.yaml")
	base := func(ps []string) (bs []string) {
		for _, p := range ps {
			bs = append(bs, filepath.Base(p))
		}
		return bs
	}
	if !slices.Equal(base(fresh), base(checked)) || len(fresh) < 5 {
		t.Fatalf("deploy/kube has %v, a fresh render %v: run scripts/render-kube.sh", base(checked), base(fresh))
	}
	for _, f := range fresh {
		a, _ := os.ReadFile(f)
		b, _ := os.ReadFile(filepath.Join("../../deploy/kube", filepath.Base(f)))
		if !bytes.Equal(a, b) {
			t.Errorf("deploy/kube/%s differs from a fresh render: run scripts/render-kube.sh", filepath.Base(f))
		}
	}
}

// TestHelmDryRunServer: the cluster's apiserver accepts every object the
// chart renders (a server-side apply, dry run: nothing is made). Only the
// two namespaces are made for real, with fresh names, and removed after;
// an object the cluster has already (the RuntimeClass gvisor, the sandbox
// namespace) is applied as a dry-run update. Rendered again with `helm
// template --dry-run=server`, the chart's lookups run against the cluster:
// the install's Secret keeps its key, and of the objects that exist it
// leaves out those another installer made (the RuntimeClass) and keeps
// those of its own release (the namespace, annotated as Helm does).
func TestHelmDryRunServer(t *testing.T) {
	t.Parallel() // see parallel_test.go
	helm := testenv.NeedHelm(t)
	kubeconfig := testenv.NeedKube(t)
	c := kubeClient(t)
	dryRun := newDryRunner(t)
	ctx := context.Background()

	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	ns, sandboxNS := "sbx-helm-"+suffix, "sbx-helm-pods-"+suffix
	for _, n := range []string{ns, sandboxNS} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if n == sandboxNS {
			obj.Annotations = map[string]string{"meta.helm.sh/release-name": "sandbox", "meta.helm.sh/release-namespace": ns}
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	if _, err := c.NodeV1().RuntimeClasses().Get(ctx, "gvisor", metav1.GetOptions{}); err != nil {
		t.Fatalf("the test cluster has no RuntimeClass gvisor (scripts/kube-up.sh makes it): %v", err)
	}
	// An install's Secret already there: the render must keep its key.
	existing := store.KeyPrefix + strings.Repeat("e", 52)
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-admin-key"}, Data: map[string][]byte{"key": []byte(existing)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	apply := func(t *testing.T, objs []*unstructured.Unstructured) {
		t.Helper()
		for _, o := range objs {
			dryRun(t, o)
		}
		// Nothing was made: the dry run left the namespaces as they were.
		if _, err := c.AppsV1().Deployments(ns).Get(ctx, "sandbox", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the dry run made the Deployment: %v", err)
		}
	}
	base := []string{"template", "sandbox", chartDir, "-n", ns, "--set", "sandboxNamespace.name=" + sandboxNS}
	for name, values := range map[string][]string{
		"defaults": nil,
		"full":     {"-f", writeValues(t, fullValues), "--set", "runtimeClass.name=gvisor,runtimeClass.create=true,sandboxNamespace.name=" + sandboxNS},
	} {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, helmRun(t, helm, append(slices.Clone(base), values...)...))
			if len(objs) < 10 {
				t.Fatalf("only %d objects rendered", len(objs))
			}
			apply(t, objs)
		})
	}
	t.Run("lookups", func(t *testing.T) {
		r := rendered{objects(t, helmRun(t, helm, append(slices.Clone(base), "--dry-run=server", "--kubeconfig", kubeconfig)...))}
		key, _ := base64.StdEncoding.DecodeString(str(r.get(t, "Secret", "sandbox-admin-key").Object, "data", "key"))
		if string(key) != existing {
			t.Errorf("the render made a new key over the install's (lookup)")
		}
		if r.has("RuntimeClass", "") {
			t.Error("the chart renders the RuntimeClass gvisor another installer made (helm install would fail on it)")
		}
		if !r.has("Namespace", sandboxNS) || !r.has("NetworkPolicy", kube.IsolationPolicy) {
			t.Error("the chart left out its own release's namespace, or the isolation policy no one made")
		}
		apply(t, r.objs)
	})
	t.Run("a RuntimeClass of another handler", func(t *testing.T) {
		// The cluster's gvisor runs runsc; a chart told its sandboxes run
		// under another handler must not take that RuntimeClass as its own.
		out, err := exec.Command(helm, append(slices.Clone(base), "--dry-run=server", "--kubeconfig", kubeconfig, "--set", "runtimeClass.handler=runc")...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `RuntimeClass gvisor exists with handler "runsc", not "runc"`) {
			t.Errorf("rendered over a RuntimeClass of another handler: %v %.300s", err, out)
		}
	})
}
