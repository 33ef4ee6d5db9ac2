package integration_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/credential"
	"github.com/sandboxd/sandbox/internal/runtime"
)

// TestKubeLeaseCredential: on the real cluster the credential reaches the
// pod over exec into its memory emptyDir, the sandbox user's alone, and is
// in no part of the pod's spec or status; it reads its own lease.
func TestKubeLeaseCredential(t *testing.T) {
	e, c, ns := newKubeEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 300})
	tok := e.credentialIn("acme", id)
	if tok == "" {
		t.Fatal("the pod has no credential at " + credential.Path)
	}
	if out := e.sh("acme", id, "stat -c '%a %u' /run/sandbox/token; id -u; grep -c ' /run/sandbox ' /proc/mounts"); out != "600 1000\n1000\n1\n" {
		t.Errorf("the credential file in the pod (mode uid; id -u; its own mount): %q", out)
	}
	claims := e.verifyPublished(tok)
	if claims.Sandbox != id || claims.Org != "acme" {
		t.Errorf("claims %+v", claims)
	}
	e.must(200, "GET", "/v1/sandbox/"+id, tok, nil)
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	memory := false
	for _, v := range pods.Items[0].Spec.Volumes {
		memory = memory || (v.Name == "credential" && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory)
	}
	if !memory {
		t.Error("the credential's directory is not a memory emptyDir (the node's tmpfs, never its disk)")
	}
	spec, _ := json.Marshal(pods.Items[0])
	sig := signature(tok)
	if strings.Contains(string(spec), sig) || strings.Contains(string(spec), e.keys["acme"]) {
		t.Error("a credential is in the pod object")
	}
	e.noSecretIn(tok)
	e.noSecretIn(e.keys["acme"])
}
