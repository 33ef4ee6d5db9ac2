package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// TestKubeManifests: the cluster's apiserver accepts every object of
// deploy/kube (a server-side dry run, with the two namespaces created for
// real and removed after), and the server's Role grants nothing beyond the
// sandbox namespace's pods, exec, claims, events and the isolation policy.
func TestKubeManifests(t *testing.T) {
	c := kubeClient(t)
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("SANDBOX_TEST_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Discovery()))
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
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s %s/%s refused: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
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
							if v != "create" && v != "update" {
								t.Errorf("the server's role may %s secrets", v)
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
