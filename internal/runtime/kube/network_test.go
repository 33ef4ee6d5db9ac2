package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

func rules(t *testing.T, p netpolicy.Policy) *netpolicy.Rules {
	t.Helper()
	r, err := netpolicy.Parse(&p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// blocks is each ipBlock as "cidr except e1 e2 ...", after checking what
// the apiserver's validation checks: every except strictly inside its cidr.
func blocks(t *testing.T, peers []networkingv1.NetworkPolicyPeer) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range peers {
		if p.IPBlock == nil || p.PodSelector != nil || p.NamespaceSelector != nil {
			t.Fatalf("a peer that is not an ipBlock: %+v", p)
		}
		c := netip.MustParsePrefix(p.IPBlock.CIDR)
		for _, e := range p.IPBlock.Except {
			q := netip.MustParsePrefix(e)
			if q.Bits() <= c.Bits() || !c.Contains(q.Addr()) {
				t.Errorf("except %s is not strictly inside %s (the apiserver refuses it)", e, c)
			}
		}
		out[p.IPBlock.CIDR] = p.IPBlock.Except
	}
	return out
}

func TestEgressPeers(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("203.0.113.64/26")} // say, public node addresses
	never := netpolicy.Never(nil, cluster...)

	got := blocks(t, egressPeers(rules(t, netpolicy.Policy{Allow: []string{"203.0.113.0/24", "198.51.100.7"}, Deny: []string{"203.0.113.128/25"}}), never))
	want := map[string][]string{
		"203.0.113.0/24":  {"203.0.113.64/26", "203.0.113.128/25"},
		"198.51.100.7/32": nil,
	}
	if len(got) != len(want) || !slices.Equal(got["203.0.113.0/24"], want["203.0.113.0/24"]) || got["198.51.100.7/32"] != nil {
		t.Errorf("CIDR policy blocks = %v, want %v", got, want)
	}

	// "internet" is one block, everything never reachable in its except;
	// the deny list too.
	got = blocks(t, egressPeers(rules(t, netpolicy.Policy{Allow: []string{"internet", "198.51.100.0/24"}, Deny: []string{"198.51.100.9"}}), never))
	ex, ok := got["0.0.0.0/0"]
	if len(got) != 1 || !ok {
		t.Fatalf("internet blocks = %v, want one 0.0.0.0/0", got)
	}
	for _, a := range []string{"127.0.0.1", "169.254.169.254", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.1", "224.0.0.1", "255.255.255.255", "203.0.113.65", "198.51.100.9"} {
		if !slices.ContainsFunc(ex, func(e string) bool { return netip.MustParsePrefix(e).Contains(netip.MustParseAddr(a)) }) {
			t.Errorf("internet: %s is reachable (except %v)", a, ex)
		}
	}
	for _, a := range []string{"198.51.100.8", "203.0.113.1", "8.8.8.8"} {
		if slices.ContainsFunc(ex, func(e string) bool { return netip.MustParsePrefix(e).Contains(netip.MustParseAddr(a)) }) {
			t.Errorf("internet: %s is refused (except %v)", a, ex)
		}
	}

	// A CIDR inside the never-reachable set is no block at all (an
	// except equal to its cidr is invalid, and it would allow nothing).
	if got := egressPeers(rules(t, netpolicy.Policy{Allow: []string{"10.0.0.0/8", "169.254.169.254", "203.0.113.64/27"}}), never); len(got) != 0 {
		t.Errorf("never-reachable CIDRs gave blocks %v", blocks(t, got))
	}
	// An opened private range is allowed, the rest of 10/8 still not.
	opened := netpolicy.Never([]netip.Prefix{netip.MustParsePrefix("10.5.0.0/16")})
	got = blocks(t, egressPeers(rules(t, netpolicy.Policy{Allow: []string{"10.0.0.0/8"}}), opened))
	if ex := got["10.0.0.0/8"]; len(got) != 1 || slices.ContainsFunc(ex, func(e string) bool { return netip.MustParsePrefix(e).Contains(netip.MustParseAddr("10.5.1.1")) }) ||
		!slices.ContainsFunc(ex, func(e string) bool { return netip.MustParsePrefix(e).Contains(netip.MustParseAddr("10.6.1.1")) }) {
		t.Errorf("opened 10.5/16 in 10/8: blocks %v", got)
	}
	if got := egressPeers(rules(t, netpolicy.Policy{}), never); got != nil {
		t.Errorf("none gave blocks %v", got)
	}
}

func TestEgressPorts(t *testing.T) {
	str := func(ps []networkingv1.NetworkPolicyPort) []string {
		var out []string
		for _, p := range ps {
			s := string(*p.Protocol) + "/" + p.Port.String()
			if p.EndPort != nil {
				s += fmt.Sprintf("-%d", *p.EndPort)
			}
			out = append(out, s)
		}
		return out
	}
	// Every port of TCP and UDP but DNS's (53, and 853 over TLS): a
	// sandbox asks its own resolver only. No other protocol.
	if got, want := str(egressPorts(nil)), []string{"TCP/1-52", "UDP/1-52", "TCP/54-852", "UDP/54-852", "TCP/854-65535", "UDP/854-65535"}; !slices.Equal(got, want) {
		t.Errorf("no ports: %v, want %v", got, want)
	}
	if got, want := str(egressPorts([]uint16{53, 80, 443, 853})), []string{"TCP/80", "UDP/80", "TCP/443", "UDP/443"}; !slices.Equal(got, want) {
		t.Errorf("ports = %v, want %v", got, want)
	}
	if got := egressPorts([]uint16{53}); got != nil {
		t.Errorf("DNS's port only: %v, want nothing", got)
	}
	r := &Runtime{}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sbx-a", Labels: map[string]string{runtime.LabelSandbox: "sb_a"}}}
	if np := r.egressPolicy(pod, rules(t, netpolicy.Policy{Allow: []string{"internet"}, Ports: []int{53}})); np != nil {
		t.Errorf("a policy of DNS's port only: %+v, want no NetworkPolicy (nothing it may reach)", np.Spec.Egress)
	}
}

func TestCheckNetworkRefusesNames(t *testing.T) {
	r := &Runtime{}
	if err := r.CheckNetwork(rules(t, netpolicy.Policy{Allow: []string{"internet", "203.0.113.0/24"}})); err != nil {
		t.Errorf("CIDR policy refused: %v", err)
	}
	if err := r.CheckNetwork(nil); err != nil {
		t.Errorf("no policy refused: %v", err)
	}
	err := r.CheckNetwork(rules(t, netpolicy.Policy{Allow: []string{"internet"}, Deny: []string{"*.evil.example"}}))
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != sandbox.KindUnsupported {
		t.Fatalf("domain rule: %v, want a KindUnsupported *sandbox.Error", err)
	}
	if want := "*.evil.example"; !strings.Contains(se.Msg, want) || !strings.Contains(se.Msg, "CIDR") {
		t.Errorf("message %q does not name the rule and say what works", se.Msg)
	}
}

// TestSetNetworkObjects drives SetNetwork and Delete against a fake
// clientset: the objects, not the enforcement (kube_network_test.go).
func TestSetNetworkObjects(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sbx-a", Namespace: "sandboxes", UID: "uid-a",
		Labels: map[string]string{runtime.LabelSandbox: "sb_a", runtime.LabelOrg: "acme"}}}
	cs := fake.NewClientset(pod)
	r := &Runtime{cfg: Config{Client: cs}, ns: "sandboxes"}
	nps := cs.NetworkingV1().NetworkPolicies("sandboxes")

	if err := r.SetNetwork(ctx, "sbx-a", rules(t, netpolicy.Policy{Allow: []string{"203.0.113.0/24"}, Ports: []int{80}})); err != nil {
		t.Fatal(err)
	}
	np, err := nps.Get(ctx, "sbx-a-egress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case np.Labels[runtime.LabelSandbox] != "sb_a" || np.Labels[runtime.LabelOrg] != "acme":
		t.Errorf("labels %v: the sweep's labels are missing", np.Labels)
	case len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != "uid-a" || np.OwnerReferences[0].Kind != "Pod":
		t.Errorf("owner %+v, want the pod", np.OwnerReferences)
	case np.Spec.PodSelector.MatchLabels[runtime.LabelSandbox] != "sb_a" || len(np.Spec.PodSelector.MatchLabels) != 1:
		t.Errorf("selector %+v", np.Spec.PodSelector)
	case !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}):
		t.Errorf("policy types %v: egress only (ingress stays the deny-all's)", np.Spec.PolicyTypes)
	case len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "203.0.113.0/24" || len(np.Spec.Egress[0].Ports) != 2:
		t.Errorf("egress %+v", np.Spec.Egress)
	}

	// Replaced in place.
	if err := r.SetNetwork(ctx, "sbx-a", rules(t, netpolicy.Policy{Allow: []string{"198.51.100.0/24"}})); err != nil {
		t.Fatal(err)
	}
	np, _ = nps.Get(ctx, "sbx-a-egress", metav1.GetOptions{})
	if np.Spec.Egress[0].To[0].IPBlock.CIDR != "198.51.100.0/24" {
		t.Errorf("after replace: %+v", np.Spec.Egress)
	}
	// Domain rules: refused, the policy untouched.
	if err := r.SetNetwork(ctx, "sbx-a", rules(t, netpolicy.Policy{Allow: []string{"pypi.org"}})); sandbox.KindOf(err) != sandbox.KindUnsupported {
		t.Errorf("domain policy: %v", err)
	}
	// None: the policy goes, the deny-all is all that is left.
	if err := r.SetNetwork(ctx, "sbx-a", rules(t, netpolicy.Policy{})); err != nil {
		t.Fatal(err)
	}
	if l, err := nps.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		t.Errorf("none left %d policies", len(l.Items))
	}
	if err := r.SetNetwork(ctx, "sbx-gone", rules(t, netpolicy.Policy{Allow: []string{"198.51.100.0/24"}})); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("missing pod: %v", err)
	}

	// Delete takes the policy with the pod, and leaves another pod's alone.
	if err := r.SetNetwork(ctx, "sbx-a", rules(t, netpolicy.Policy{Allow: []string{"198.51.100.0/24"}})); err != nil {
		t.Fatal(err)
	}
	if err := r.deleteNetwork(ctx, "sbx-a", "uid-other"); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Get(ctx, "sbx-a-egress", metav1.GetOptions{}); err != nil {
		t.Errorf("a delete under another identity removed the policy: %v", err)
	}
	if err := r.Delete(ctx, runtime.Ref{Name: "sbx-a", UID: "uid-a"}); err != nil {
		t.Fatal(err)
	}
	if l, err := nps.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l.Items) != 0 {
		t.Errorf("delete left %d policies", len(l.Items))
	}
}

// TestGatewayObjects: with the egress gateway, a pod asks it (and only it)
// for names and carries its policy; a policy with names may reach the
// gateway; a name denied inside what addresses allow is refused; the
// gateway's objects are made once and kept as they should be.
func TestGatewayObjects(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sbx-a", Namespace: "sandboxes", UID: "uid-a",
		Labels: map[string]string{runtime.LabelSandbox: "sb_a"}}}
	cs := fake.NewClientset(pod)
	r := &Runtime{cfg: Config{Client: cs, Gateway: true, RunnerImage: "sandbox/server:local", GatewayDNS: "192.0.2.53", Image: func(n string) string { return n },
		ClusterNever: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}, ns: "sandboxes"}
	// The fake gives a Service no ClusterIP: one is set as the cluster would.
	if err := r.ensureGateway(ctx); err == nil || !strings.Contains(err.Error(), "ClusterIP") {
		t.Fatalf("a Service with no address: %v", err)
	}
	svc, _ := cs.CoreV1().Services("sandboxes").Get(ctx, GatewayName, metav1.GetOptions{})
	svc.Spec.ClusterIP = "10.96.0.53"
	cs.CoreV1().Services("sandboxes").Update(ctx, svc, metav1.UpdateOptions{})
	if err := r.ensureGateway(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.ensureGateway(ctx); err != nil { // again: kept, not made twice
		t.Fatal(err)
	}
	if r.gatewayIP.String() != "10.96.0.53" {
		t.Errorf("gateway address %v", r.gatewayIP)
	}
	dep, err := cs.AppsV1().Deployments("sandboxes").Get(ctx, GatewayName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps := dep.Spec.Template.Spec
	args := strings.Join(ps.Containers[0].Command, " ")
	switch {
	case !strings.Contains(args, "egress-gateway --namespace sandboxes --dns 192.0.2.53 --never 10.96.0.0/16"):
		t.Errorf("command %q", args)
	case ps.ServiceAccountName != GatewayName || ps.RuntimeClassName != nil:
		t.Errorf("account %q, runtime class %v", ps.ServiceAccountName, ps.RuntimeClassName)
	case ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot || len(ps.Containers[0].SecurityContext.Capabilities.Add) != 0:
		t.Errorf("the gateway runs as root or with a capability: %+v", ps.SecurityContext)
	}
	role, err := cs.RbacV1().Roles("sandboxes").Get(ctx, GatewayName, metav1.GetOptions{})
	if err != nil || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"pods"}) || slices.ContainsFunc(role.Rules[0].Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
		t.Errorf("the gateway's role reads more than pods: %+v %v", role, err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("sandboxes").Get(ctx, GatewayDNSPolicy, metav1.GetOptions{}); err != nil {
		t.Errorf("the pods' way to their resolver: %v", err)
	}

	named := rules(t, netpolicy.Policy{Allow: []string{"pypi.org", "203.0.113.0/24"}, Ports: []int{443}})
	p := r.pod(runtime.Spec{Name: "sbx-b", Network: named, Workdir: "/work", Volume: runtime.Volume{Scratch: true}})
	if p.Spec.DNSPolicy != corev1.DNSNone || !slices.Equal(p.Spec.DNSConfig.Nameservers, []string{"10.96.0.53"}) {
		t.Errorf("dns %v %+v", p.Spec.DNSPolicy, p.Spec.DNSConfig)
	}
	p.Status.PodIP, p.Status.Phase = "10.244.0.9", corev1.PodRunning
	got, err := podRules(p)
	if err != nil || got.Policy().Allow[0] != "pypi.org" || !slices.Equal(got.Ports, []uint16{443}) {
		t.Errorf("the policy the pod carries: %+v %v", got, err)
	}
	np := r.egressPolicy(pod, named)
	if len(np.Spec.Egress) != 2 || np.Spec.Egress[1].To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != GatewayName || len(np.Spec.Egress[1].Ports) != 0 {
		t.Errorf("a policy with names does not reach the gateway: %+v", np.Spec.Egress)
	}
	if np := r.egressPolicy(pod, rules(t, netpolicy.Policy{Allow: []string{"internet"}})); len(np.Spec.Egress) != 1 {
		t.Errorf("a policy without names reaches the gateway beyond its resolver: %+v", np.Spec.Egress)
	}
	if err := r.CheckNetwork(named); err != nil {
		t.Errorf("names with the gateway: %v", err)
	}
	for _, p := range []netpolicy.Policy{{Allow: []string{"internet"}, Deny: []string{"evil.example"}}, {Allow: []string{"10.0.0.0/8"}, Deny: []string{"evil.example"}}} {
		if err := r.CheckNetwork(rules(t, p)); sandbox.KindOf(err) != sandbox.KindUnsupported || !strings.Contains(err.Error(), "evil.example") {
			t.Errorf("%+v: %v", p, err)
		}
	}
	if err := r.CheckNetwork(rules(t, netpolicy.Policy{Allow: []string{"*.example.org"}, Deny: []string{"evil.example.org"}})); err != nil {
		t.Errorf("a name denied inside an allowed wildcard: %v", err)
	}

	// SetNetwork rewrites the policy the pod carries; none removes it.
	if err := r.SetNetwork(ctx, "sbx-a", named); err != nil {
		t.Fatal(err)
	}
	cur, _ := cs.CoreV1().Pods("sandboxes").Get(ctx, "sbx-a", metav1.GetOptions{})
	if cur.Annotations[AnnotationEgress] != policyAnnotation(named) {
		t.Errorf("annotation %q", cur.Annotations[AnnotationEgress])
	}
	if err := r.SetNetwork(ctx, "sbx-a", nil); err != nil {
		t.Fatal(err)
	}
	cur, _ = cs.CoreV1().Pods("sandboxes").Get(ctx, "sbx-a", metav1.GetOptions{})
	if _, ok := cur.Annotations[AnnotationEgress]; ok {
		t.Errorf("no policy left the annotation %q", cur.Annotations[AnnotationEgress])
	}
}
