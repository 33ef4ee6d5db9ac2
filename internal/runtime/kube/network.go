package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go4.org/netipx"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// A sandbox's egress policy is a NetworkPolicy of its own, next to the
// namespace's deny-all (IsolationPolicy): NetworkPolicies add up, so the
// sandbox's pod may reach what its own policy allows and nothing else, and
// still nothing reaches it. The object is named after the pod, selects it by
// its sandbox label, carries the pod's labels (the sweep's) and is owned by
// the pod, so the cluster's garbage collector removes it with the pod even
// when the server does not (killed between the two deletes, a pod deleted by
// hand). It is created after the pod runs: a pod is never without its
// deny-all, and a policy never without its pod.

// policyName is the NetworkPolicy of the pod name.
func policyName(pod string) string { return pod + "-egress" }

// CheckNetwork refuses a policy this backend cannot enforce. A
// NetworkPolicy matches addresses and ports, not names: name rules need the
// egress gateway (gateway.go), and even with it a name denied inside
// "internet" or an allowed CIDR cannot be held (a connection to the name's
// address, made without the name, passes the NetworkPolicy). The error is
// a *sandbox.Error of KindUnsupported, its message for the caller.
func (r *Runtime) CheckNetwork(rules *netpolicy.Rules) error {
	if rules == nil || !rules.HasNames() {
		return nil
	}
	names := make([]string, 0, len(rules.AllowNames)+len(rules.DenyNames))
	for _, n := range slices.Concat(rules.AllowNames, rules.DenyNames) {
		names = append(names, n.String())
	}
	if !r.gatewayIP.IsValid() {
		return sandbox.Errorf(sandbox.KindUnsupported,
			"domain rules (%s) cannot be enforced on this server's Kubernetes backend: it runs no egress gateway (it needs --runner-image, and no --no-egress-gateway); allow CIDRs (or \"internet\") instead",
			strings.Join(names, ", "))
	}
	if len(rules.DenyNames) > 0 && (rules.Internet || len(rules.AllowPrefix) > 0) {
		denied := make([]string, 0, len(rules.DenyNames))
		for _, n := range rules.DenyNames {
			denied = append(denied, n.String())
		}
		return sandbox.Errorf(sandbox.KindUnsupported,
			"denied names (%s) inside \"internet\" or an allowed CIDR cannot be enforced on this server's Kubernetes backend: its NetworkPolicies would let a connection to such a name's address through; deny the addresses, or allow names only",
			strings.Join(denied, ", "))
	}
	return nil
}

// never is the set no policy of this backend reaches: netpolicy.Never with
// the private ranges the operator opened, and the cluster's own ranges and
// addresses (Config.ClusterNever).
func (r *Runtime) never() *netipx.IPSet {
	return netpolicy.Never(r.cfg.OpenPrivate, r.cfg.ClusterNever...)
}

// egressPolicy is the NetworkPolicy that lets pod reach what rules allow;
// nil when they allow nothing (the deny-all is all there is).
func (r *Runtime) egressPolicy(pod *corev1.Pod, rules *netpolicy.Rules) *networkingv1.NetworkPolicy {
	if rules == nil {
		return nil
	}
	var egress []networkingv1.NetworkPolicyEgressRule
	if peers, ports := egressPeers(rules, r.never()), egressPorts(rules.Ports); len(peers) > 0 && len(ports) > 0 {
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: peers, Ports: ports})
	}
	if rules != nil && len(rules.AllowNames) > 0 && r.gatewayIP.IsValid() {
		// Names: through the gateway, on any of its ports; it connects on
		// only as the policy says.
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: gatewayLabels}}},
		})
	}
	if len(egress) == 0 {
		return nil
	}
	labels := map[string]string{}
	for _, k := range []string{runtime.LabelSandbox, runtime.LabelOrg} {
		if v := pod.Labels[k]; v != "" {
			labels[k] = v
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: policyName(pod.Name), Namespace: r.ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				// No blockOwnerDeletion: it would need the pods/finalizers
				// permission where OwnerReferencesPermissionEnforcement runs.
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{runtime.LabelSandbox: pod.Labels[runtime.LabelSandbox]}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}
}

// egressPeers are the ipBlocks of rules: each allowed CIDR ("internet" is
// 0.0.0.0/0) with the never-reachable ranges and the deny list inside it as
// its except. A CIDR that nothing is left of is dropped: an except must be
// strictly inside its cidr, and an empty block would mean nothing anyway.
func egressPeers(rules *netpolicy.Rules, never *netipx.IPSet) []networkingv1.NetworkPolicyPeer {
	if rules == nil {
		return nil
	}
	var blocked netipx.IPSetBuilder
	blocked.AddSet(never)
	for _, p := range rules.DenyPrefix {
		blocked.AddPrefix(p)
	}
	blockedSet, _ := blocked.IPSet()
	allow := slices.Clone(rules.AllowPrefix)
	if rules.Internet {
		allow = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")} // covers every other CIDR
	}
	var peers []networkingv1.NetworkPolicyPeer
	for _, p := range allow {
		var in netipx.IPSetBuilder
		in.AddPrefix(p)
		in.Intersect(blockedSet)
		inside, _ := in.IPSet()
		if inside.ContainsPrefix(p) {
			continue
		}
		var except []string
		for _, q := range inside.Prefixes() {
			except = append(except, q.String())
		}
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.String(), Except: except}})
	}
	return peers
}

// dnsPorts are the ports of DNS (53) and DNS over TLS (853): a sandbox
// resolves through its own resolver (the egress gateway) only, as under
// gVisor, whatever else its policy allows — another resolver is a way out
// around the policy's names.
var dnsPorts = []uint16{53, 853}

// egressPorts are the policy's ports over TCP and UDP, less dnsPorts;
// with no port, every other port of TCP and UDP (and nothing else: no
// ICMP, no SCTP), as ranges around them. Nil when nothing is left (a
// policy of DNS ports only): the caller drops the rule, which with no
// ports would allow every port.
func egressPorts(ports []uint16) []networkingv1.NetworkPolicyPort {
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}
	var out []networkingv1.NetworkPolicyPort
	if len(ports) == 0 {
		lo := int32(1)
		ends := make([]int32, 0, len(dnsPorts)+1)
		for _, d := range dnsPorts {
			ends = append(ends, int32(d))
		}
		for _, d := range append(ends, 65536) { // 65536: past the last
			if hi := d - 1; hi >= lo {
				for _, pr := range protos {
					from := intstr.FromInt32(lo)
					p := networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &from}
					if hi > lo {
						p.EndPort = &hi
					}
					out = append(out, p)
				}
			}
			lo = d + 1
		}
		return out
	}
	for _, port := range ports {
		if slices.Contains(dnsPorts, port) {
			continue
		}
		for _, pr := range protos {
			v := intstr.FromInt32(int32(port))
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &v})
		}
	}
	return out
}

// applyNetwork makes pod's egress NetworkPolicy say rules: created,
// replaced, or deleted when rules allow nothing.
func (r *Runtime) applyNetwork(ctx context.Context, pod *corev1.Pod, rules *netpolicy.Rules) error {
	nps := r.cfg.Client.NetworkingV1().NetworkPolicies(r.ns)
	want := r.egressPolicy(pod, rules)
	if want == nil {
		return r.deleteNetwork(ctx, pod.Name, pod.UID)
	}
	cur, err := nps.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := nps.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("kube: creating NetworkPolicy %s: %w", want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("kube: reading NetworkPolicy %s: %w", want.Name, err)
	}
	if !ownedBy(cur, pod.UID) {
		return fmt.Errorf("kube: NetworkPolicy %s belongs to another pod: %w", want.Name, runtime.ErrConflict)
	}
	cur.Spec, cur.Labels = want.Spec, want.Labels
	if _, err := nps.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kube: replacing NetworkPolicy %s: %w", want.Name, err)
	}
	return nil
}

// deleteNetwork deletes the egress NetworkPolicy of the pod (name, uid), if
// it is that pod's. Missing is not an error.
func (r *Runtime) deleteNetwork(ctx context.Context, pod string, uid types.UID) error {
	nps := r.cfg.Client.NetworkingV1().NetworkPolicies(r.ns)
	cur, err := nps.Get(ctx, policyName(pod), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kube: reading NetworkPolicy %s: %w", policyName(pod), err)
	}
	if !ownedBy(cur, uid) {
		return nil // another pod's under a reused name: not ours to delete
	}
	err = nps.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: deleting NetworkPolicy %s: %w", cur.Name, err)
	}
	return nil
}

func ownedBy(np *networkingv1.NetworkPolicy, uid types.UID) bool {
	return slices.ContainsFunc(np.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Pod" && o.UID == uid })
}

// SetNetwork replaces the egress policy of a running sandbox: the policy
// the pod carries (the gateway's) is rewritten, and its NetworkPolicy is
// created, replaced or deleted (rules that allow nothing leave the
// deny-all alone). The network plugin applies it to new connections; the
// gateway cuts its connections the new policy refuses. What the backend
// cannot hold is refused (CheckNetwork).
func (r *Runtime) SetNetwork(ctx context.Context, name string, rules *netpolicy.Rules) error {
	if err := r.CheckNetwork(rules); err != nil {
		return err
	}
	p, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && p.Labels[runtime.LabelSandbox] == "") {
		return runtime.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("kube: reading pod %s: %w", name, err)
	}
	if err := r.annotate(ctx, p.Name, p.UID, rules); err != nil {
		return err
	}
	return r.applyNetwork(ctx, p, rules)
}

// ClusterNever finds the cluster's own ranges and addresses that a sandbox
// must never reach, as far as the server may read them, and adds extra
// (the operator's --cluster-cidr: at least the pod and service ranges,
// which the API does not tell a namespaced server):
//   - the apiserver as the server reaches it (rest config host, resolved);
//   - the default/kubernetes EndpointSlices (the apiserver's own addresses);
//   - the ServiceCIDRs (the service ranges, Kubernetes 1.33+);
//   - every node's addresses and pod CIDRs.
//
// What the server may not read (the chart's Role is namespaced) is
// skipped with a warning: the flag covers it. Private ranges
// are never reachable anyway unless the operator opens one; this matters
// for clusters on public addresses, and for opened private ranges.
func ClusterNever(ctx context.Context, client kubernetes.Interface, rc *rest.Config, extra []netip.Prefix, log *slog.Logger) []netip.Prefix {
	out := slices.Clone(extra)
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			out = append(out, netip.PrefixFrom(a, 32))
		} else if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	skip := func(what string, err error) {
		if err != nil {
			// A warning, not a note: with an opened private range (or a
			// cluster on public addresses) what is missing here is what a
			// sandbox could reach.
			log.Warn("kube: cannot read "+what+" for the ranges no sandbox may reach: if a sandbox may reach a private range (--network-private) or the cluster is on public addresses, pass its ranges as --cluster-cidr", "err", err)
		}
	}
	if rc != nil {
		if u, err := url.Parse(rc.Host); err == nil && u.Hostname() != "" {
			if _, err := netip.ParseAddr(u.Hostname()); err == nil {
				add(u.Hostname())
			} else if ips, err := net.DefaultResolver.LookupHost(ctx, u.Hostname()); err == nil {
				for _, ip := range ips {
					add(ip)
				}
			}
		}
	}
	eps, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	skip("the apiserver's endpoints", err)
	if err == nil {
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					add(a)
				}
			}
		}
	}
	cidrs, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	skip("the ServiceCIDRs", err)
	if err == nil {
		for _, c := range cidrs.Items {
			for _, s := range c.Spec.CIDRs {
				add(s)
			}
		}
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	skip("the nodes", err)
	if err == nil {
		for _, n := range nodes.Items {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
					add(a.Address)
				}
			}
			for _, c := range n.Spec.PodCIDRs {
				add(c)
			}
		}
	}
	var b netipx.IPSetBuilder
	for _, p := range out {
		b.AddPrefix(p)
	}
	set, _ := b.IPSet()
	return set.Prefixes()
}
