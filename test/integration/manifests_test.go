package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// newDryRunner answers a server-side dry run on the test cluster: it maps
// an object's kind through discovery and applies it (server-side apply,
// DryRun All: the apiserver validates and admits it, and keeps nothing),
// failing the test with the apiserver's refusal. As kubectl apply
// --dry-run=server does, without kubectl (CI builds none).
func newDryRunner(t *testing.T) func(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", testenv.NeedKube(t))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kubeClient(t).Discovery()))
	return func(t *testing.T, o *unstructured.Unstructured) {
		t.Helper()
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			return
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		raw, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Patch(context.Background(), o.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{
			DryRun: []string{metav1.DryRunAll}, FieldManager: "sandbox-test", Force: new(true),
		}); err != nil {
			t.Errorf("%s %s/%s refused: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// TestKubeManifests: the cluster's apiserver accepts every object of
// deploy/kube (a server-side dry run, with the two namespaces created for
// real and removed after), and the server's Role grants nothing beyond the
// sandbox namespace's pods, exec, claims, events and the isolation policy.
func TestKubeManifests(t *testing.T) {
	c := kubeClient(t)
	dryRun := newDryRunner(t)
	ctx := context.Background()

	files, _ := filepath.Glob("../../deploy/kube/*.yaml")
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if strings.HasSuffix(f, "kustomization.yaml") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(m) == 0 {
				continue // comments only
			}
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	if len(objs) < 9 {
		t.Fatalf("only %d objects in deploy/kube", len(objs))
	}
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			continue
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		name := o.GetName()
		t.Cleanup(func() { c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		dryRun(t, o)
		if gvk.Kind == "Role" || gvk.Kind == "ClusterRole" {
			if gvk.Kind == "ClusterRole" || o.GetNamespace() != "sandboxes" {
				t.Errorf("%s %s/%s reaches past the sandbox namespace", gvk.Kind, o.GetNamespace(), o.GetName())
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				verbs, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "verbs")
				for _, name := range res {
					switch name {
					case "pods", "pods/exec", "persistentvolumeclaims", "events", "networkpolicies":
					case "secrets":
						// Kept (imagePullSecrets), never read back.
						for _, v := range verbs {
							if v != "create" && v != "update" && v != "delete" {
								t.Errorf("the server's role may %s secrets", v)
							}
						}
					case "serviceaccounts", "services", "deployments", "roles", "rolebindings":
						// The egress gateway's, made and kept at start:
						// never listed, never deleted.
						for _, v := range verbs {
							if v != "get" && v != "create" && v != "update" {
								t.Errorf("the server's role may %s %s", v, name)
							}
						}
					default:
						t.Errorf("the server's role grants %q", name)
					}
				}
			}
		}
		if gvk.Kind == "ServiceAccount" && o.GetName() == "sandbox-pod" {
			if v, ok, _ := unstructured.NestedBool(o.Object, "automountServiceAccountToken"); !ok || v {
				t.Errorf("the pods' service account mounts its token")
			}
		}
	}
}
