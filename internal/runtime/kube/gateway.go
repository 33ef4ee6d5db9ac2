package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
)

// The egress gateway (internal/egress.Gateway) is how a pod's name rules
// hold on a cluster: a Deployment of the server's own image in the sandbox
// namespace, the resolver of every sandbox pod and the name-checking proxy
// of those with name rules. The backend makes it, and keeps it as it
// should be, at the start (ensureGateway):
//
//   - a ServiceAccount and a Role that reads the namespace's pods, which
//     carry their policy (AnnotationEgress): the gateway knows a pod by
//     its address;
//   - the Deployment (one replica, the runc handler: it runs the server's
//     code, not a tenant's; no capability, not root: the pod's safe sysctl
//     lets it listen on ports below 1024) and a Service with the resolver's
//     port, whose ClusterIP is every sandbox pod's nameserver;
//   - GatewayDNSPolicy, which lets every sandbox pod ask that resolver
//     (and nothing else of it): a pod of no policy is answered "refused"
//     at once rather than left to time out.
//
// A pod whose policy has name rules may reach the gateway on every port
// (its own egress NetworkPolicy names it, egressPolicy); the gateway
// connects on only as the policy says.

// Names of the gateway's objects.
const (
	GatewayName      = "sandbox-egress-gateway"
	GatewayDNSPolicy = "sandbox-egress-dns"
	// AnnotationEgress is a sandbox pod's network policy as JSON
	// (netpolicy.Policy), which the gateway reads; none means no network.
	AnnotationEgress = "sandbox.dev/egress"
)

// gatewayLabels select the gateway's pods.
var gatewayLabels = map[string]string{"app.kubernetes.io/name": GatewayName, "app.kubernetes.io/managed-by": "sandbox"}

// GatewayInImage is where the server's image holds the gateway's command.
const GatewayInImage = "/usr/local/bin/sandbox"

// ensureGateway makes the gateway's objects as they should be and learns
// its Service's address (r.gatewayIP).
func (r *Runtime) ensureGateway(ctx context.Context) error {
	c := r.cfg.Client
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: gatewayLabels}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: meta(GatewayName)}
	if err := ensure(ctx, c.CoreV1().ServiceAccounts(r.ns), sa, func(cur *corev1.ServiceAccount) bool { return false }); err != nil {
		return err
	}
	role := &rbacv1.Role{ObjectMeta: meta(GatewayName), Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"},
	}}}
	if err := ensure(ctx, c.RbacV1().Roles(r.ns), role, func(cur *rbacv1.Role) bool {
		cur.Rules = role.Rules
		return true
	}); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: meta(GatewayName),
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: GatewayName},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: GatewayName, Namespace: r.ns}}}
	if err := ensure(ctx, c.RbacV1().RoleBindings(r.ns), rb, func(cur *rbacv1.RoleBinding) bool {
		cur.Subjects = rb.Subjects // the role's reference cannot change
		return true
	}); err != nil {
		return err
	}
	dep := r.gatewayDeployment()
	if err := ensure(ctx, c.AppsV1().Deployments(r.ns), dep, func(cur *appsv1.Deployment) bool {
		cur.Spec.Template, cur.Spec.Replicas, cur.Labels = dep.Spec.Template, dep.Spec.Replicas, dep.Labels
		return true
	}); err != nil {
		return err
	}
	svc := &corev1.Service{ObjectMeta: meta(GatewayName), Spec: corev1.ServiceSpec{
		Selector: gatewayLabels,
		Ports: []corev1.ServicePort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
		},
	}}
	if err := ensure(ctx, c.CoreV1().Services(r.ns), svc, func(cur *corev1.Service) bool {
		cur.Spec.Selector, cur.Spec.Ports = svc.Spec.Selector, svc.Spec.Ports
		return true
	}); err != nil {
		return err
	}
	got, err := c.CoreV1().Services(r.ns).Get(ctx, GatewayName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kube: reading Service %s: %w", GatewayName, err)
	}
	ip, err := netip.ParseAddr(got.Spec.ClusterIP)
	if err != nil || !ip.Is4() {
		return fmt.Errorf("kube: Service %s has no IPv4 ClusterIP (%q)", GatewayName, got.Spec.ClusterIP)
	}
	r.gatewayIP = ip
	udp, tcp, dnsPort := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	np := &networkingv1.NetworkPolicy{ObjectMeta: meta(GatewayDNSPolicy), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: runtime.LabelSandbox, Operator: metav1.LabelSelectorOpExists}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: gatewayLabels}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dnsPort}, {Protocol: &tcp, Port: &dnsPort}},
		}},
	}}
	return ensure(ctx, c.NetworkingV1().NetworkPolicies(r.ns), np, func(cur *networkingv1.NetworkPolicy) bool {
		cur.Spec = np.Spec
		return true
	})
}

// object is what ensure needs of a client of T.
type objects[T any] interface {
	Get(ctx context.Context, name string, o metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, o metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, o metav1.UpdateOptions) (T, error)
}

// ensure creates want, or makes the existing object say what want says
// (set copies want's content onto it and reports whether to write it).
// Another server starting beside this one (the chart's replicas) may make
// or write the object between the read and the write: its AlreadyExists
// and Conflict are answered by reading again.
func ensure[T metav1.Object](ctx context.Context, c objects[T], want T, set func(cur T) bool) error {
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		cur, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, want, metav1.CreateOptions{})
		} else if err == nil && set(cur) {
			_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kube: the egress gateway's %s: %w", want.GetName(), err)
	}
	return nil
}

// gatewayDeployment is the gateway's Deployment.
func (r *Runtime) gatewayDeployment() *appsv1.Deployment {
	one, no, yes, user := int32(1), false, true, int64(65532)
	args := []string{GatewayInImage, "egress-gateway", "--namespace", r.ns}
	if r.cfg.GatewayDNS != "" {
		args = append(args, "--dns", r.cfg.GatewayDNS)
	}
	for _, p := range r.cfg.ClusterNever {
		args = append(args, "--never", p.String())
	}
	for _, p := range r.cfg.OpenPrivate {
		args = append(args, "--open-private", p.String())
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: GatewayName, Namespace: r.ns, Labels: gatewayLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: gatewayLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: gatewayLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: GatewayName,
					EnableServiceLinks: &no,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: &yes, RunAsUser: &user, RunAsGroup: &user,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						// A safe sysctl (allowed by every kubelet and the
						// restricted Pod Security level): ports 53, 80 and
						// 443 without a capability.
						Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
					},
					Containers: []corev1.Container{{
						Name:            "gateway",
						Image:           r.cfg.RunnerImage,
						ImagePullPolicy: pullPolicy(r.cfg.RunnerImage),
						Command:         args,
						Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"},
						}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(10, resource.DecimalSI), corev1.ResourceMemory: mib(32)},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(1000, resource.DecimalSI), corev1.ResourceMemory: mib(256)},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(53)}},
							PeriodSeconds: 2,
						},
						SecurityContext: &corev1.SecurityContext{
							RunAsNonRoot: &yes, ReadOnlyRootFilesystem: &yes, AllowPrivilegeEscalation: &no,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// gatewayReady waits until the gateway has a ready pod (the first lease
// after the gateway was made waits for it), or ctx ends.
func (r *Runtime) gatewayReady(ctx context.Context) error {
	if r.gatewayUp.Load() {
		return nil
	}
	for {
		d, err := r.cfg.Client.AppsV1().Deployments(r.ns).Get(ctx, GatewayName, metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas > 0 {
			r.gatewayUp.Store(true)
			return nil
		}
		select {
		case <-ctx.Done():
			why := "no ready pod"
			if err != nil {
				why = err.Error()
			}
			return fmt.Errorf("kube: the egress gateway is not ready (%s): see its pod in the sandbox namespace", why)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// policyAnnotation is rules as the pod's AnnotationEgress.
func policyAnnotation(rules *netpolicy.Rules) string {
	b, _ := json.Marshal(rules.Policy())
	return string(b)
}

// SetNetwork's annotation: a merge patch of the pod's AnnotationEgress.
func (r *Runtime) annotate(ctx context.Context, pod string, uid types.UID, rules *netpolicy.Rules) error {
	var v any // null deletes it
	if rules != nil {
		v = policyAnnotation(rules)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "annotations": map[string]any{AnnotationEgress: v}}})
	_, err := r.cfg.Client.CoreV1().Pods(r.ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kube: writing the policy on pod %s: %w", pod, err)
	}
	return nil
}

// Gateway is what WatchPolicies tells: each sandbox pod's address and
// policy, and when a pod is gone (internal/egress.Gateway).
type Gateway interface {
	Set(pod string, ip netip.Addr, rules *netpolicy.Rules)
	Forget(pod string)
}

// WatchPolicies tells gw each sandbox pod of namespace ns that has an
// address, with its policy (AnnotationEgress; a pod without one has no
// network), until ctx ends. It returns once the first list is told.
func WatchPolicies(ctx context.Context, client kubernetes.Interface, ns string, gw Gateway, log *slog.Logger) error {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = runtime.LabelSandbox }))
	inf := f.Core().V1().Pods().Informer()
	tell := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			gw.Forget(p.Name)
			return
		}
		rules, err := podRules(p)
		if err != nil {
			log.Warn("egress gateway: a pod's policy cannot be read: it has no network", "pod", p.Name, "err", err)
		}
		gw.Set(p.Name, ip, rules)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tell,
		UpdateFunc: func(_, obj any) { tell(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				gw.Forget(p.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("kube: the pods' watch did not sync")
	}
	return nil
}

// podRules is the policy pod p carries (nil: none).
func podRules(p *corev1.Pod) (*netpolicy.Rules, error) {
	raw, ok := p.Annotations[AnnotationEgress]
	if !ok {
		return nil, nil
	}
	var pol netpolicy.Policy
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pol); err != nil {
		return nil, err
	}
	return netpolicy.Parse(&pol)
}
