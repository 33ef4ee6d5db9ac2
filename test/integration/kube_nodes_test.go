package integration_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestKubeTwoNodes: on a cluster of two nodes (the second on this same
// machine, with its own containerd, kubelet, bridge and NetworkPolicy
// enforcer: KUBE_UP_NODE=2 scripts/kube-up.sh) leases land on both, and a
// sandbox on either works alike — exec and files through its own node's
// kubelet — and is held by its deny-all policy: not even the apiserver's
// Service answers it — and each node's enforcer holds its own node's pods
// (their addresses in its nftables table, not in the other node's).
// scripts/test.sh adds the node after the other suites and runs this test
// alone.
func TestKubeTwoNodes(t *testing.T) {
	c := kubeClient(t)
	ctx := context.Background()
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready < 2 {
		testenv.Missing(t, testenv.KubeNodes, "a second Ready node (KUBE_UP_NODE=2 scripts/kube-up.sh ROOT; KUBE_NODE=2 scripts/kube-image.sh ROOT sandbox/exec:local DIR)")
	}

	e, c, ns := newKubeEnv(t)
	byNode := map[string]string{} // node -> a sandbox on it
	podIP := map[string]string{}  // sandbox -> its pod's address
	// The scheduler spreads bare pods by what each node has free, so a few
	// leases reach both; eight is the bound, not the expectation.
	for i := 0; i < 8 && len(byNode) < 2; i++ {
		id := e.lease("acme", map[string]any{"ttlSec": 300})
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: runtime.LabelSandbox + "=" + id})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("pods of %s: %v %v", id, pods, err)
		}
		if n := pods.Items[0].Spec.NodeName; byNode[n] == "" {
			byNode[n] = id
			podIP[id] = pods.Items[0].Status.PodIP
		}
	}
	if len(byNode) < 2 {
		t.Fatalf("every lease on one node: %v", byNode)
	}
	t.Logf("sandboxes by node: %v, addresses %v", byNode, podIP)
	for node, id := range byNode {
		if out := e.sh("acme", id, "echo $((6*7)); cat /etc/hostname"); out != "42\nsandbox\n" {
			t.Errorf("exec on %s: %q", node, out)
		}
		body := []byte("on " + node)
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=n.txt", "acme", body)
		if r := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=n.txt", "acme", nil); string(r.Body) != string(body) {
			t.Errorf("files on %s: %q", node, r.Body)
		}
		// Deny-all: the kubernetes Service (the apiserver, which the host
		// guard hands to the pod's own node's enforcer) does not answer.
		out := e.sh("acme", id, `python3 -c "
import socket
try:
    socket.create_connection(('10.96.0.1', 443), timeout=3)
    print('connected')
except OSError as e:
    print('refused', type(e).__name__)
"`)
		if !strings.HasPrefix(out, "refused") {
			t.Errorf("a sandbox on %s reached the apiserver under deny-all: %q", node, out)
		}
		// kube-up.sh names each node's table: node 1 upstream's, node N's
		// with -N.
		own, other := "kube-network-policies", "kube-network-policies-2"
		if node != "sandbox-node" {
			own, other = other, own
		}
		if !inPodSet(t, own, podIP[id]) || inPodSet(t, other, podIP[id]) {
			t.Errorf("%s's pod %s: in %s %v, in %s %v (want its own node's only)", node, podIP[id],
				own, inPodSet(t, own, podIP[id]), other, inPodSet(t, other, podIP[id]))
		}
	}
}

// inPodSet reports whether addr is in the podips-v4 set of kube-netpol's
// nftables table (the pods whose packets that enforcer queues).
func inPodSet(t *testing.T, table, addr string) bool {
	t.Helper()
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	set, err := conn.GetSetByName(&nftables.Table{Name: table, Family: nftables.TableFamilyINet}, "podips-v4")
	if err != nil {
		t.Fatalf("the podips-v4 set of table %s: %v", table, err)
	}
	els, err := conn.GetSetElements(set)
	if err != nil {
		t.Fatal(err)
	}
	want := net.ParseIP(addr).To4()
	for _, el := range els {
		if net.IP(el.Key).Equal(want) {
			return true
		}
	}
	return false
}
