package kube

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Options are the operator's settings of the backend (flags).
type Options struct {
	// Kubeconfig is a kubeconfig file; empty means the in-cluster config
	// (the server running as a pod).
	Kubeconfig string
	// Namespace of the sandbox pods (required; never a system namespace).
	Namespace string
	// ServerNamespace is the server's own namespace, which the sandboxes
	// must not share; empty means unknown.
	ServerNamespace string
	// RuntimeClass is the RuntimeClass of the default runtime (gvisor);
	// empty runs pods without one.
	RuntimeClass string
	// ServiceAccount the pods run as; empty means "sandbox-pod".
	ServiceAccount string
	// StorageClass of project volumes; empty means the cluster's default.
	StorageClass string
	// PushRepo is where snapshots are pushed, a repository the cluster
	// pulls from; empty refuses snapshots.
	PushRepo string
	// PushResolve resolves PushRepo's host, once at the start, to its
	// address, which snapshots are then pushed to and pulled from: the
	// chart's registry is a Service whose name the server resolves (the
	// cluster's DNS) and a node's container runtime does not, while its
	// ClusterIP both reach.
	PushResolve bool
	// RunnerImage is the image the pods' runner comes from (the server's
	// own, which holds it at RunnerInImage); empty refuses snapshots.
	RunnerImage string
	// NoEgressGateway runs no egress gateway (gateway.go), which policies'
	// name rules need; by default it runs where RunnerImage is given (it
	// runs the server's image).
	NoEgressGateway bool
	// GatewayDNS is the upstream resolver the gateway asks; empty means
	// its pod's own (the cluster's DNS).
	GatewayDNS string
	// ClusterCIDRs are ranges of the cluster no sandbox policy reaches, on
	// top of what the server reads from the cluster (ClusterNever): its pod
	// and service ranges at least, which a namespaced server cannot read,
	// and its nodes' and apiserver's addresses. Empty: only what it reads.
	ClusterCIDRs []string
}

// Hooks are what the backend is told by the server: how an image (a
// class's name, or a pulled image's digest) maps to a container image
// (nil: "sandbox/NAME:local"), its environment and its imagePullSecret.
//
// NetworkPrivate are the private ranges the operator opened to egress
// policies (--network-private); nil: none.
type Hooks struct {
	Image          func(string) string
	ImageEnv       func(string) []string
	PullSecret     func(org, image string) (ref, secret string)
	NetworkPrivate []netip.Prefix
}

// RegisterFlags defines the backend's flags on fs, writing into o.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kube: kubeconfig file (default: the in-cluster config of the server's pod)")
	fs.StringVar(&o.Namespace, "namespace", "sandboxes", "kube: namespace of the sandbox pods (never default, kube-* or the server's own)")
	fs.StringVar(&o.RuntimeClass, "runtime-class", "gvisor", "kube: RuntimeClass of the gvisor runtime (required: it must exist; pods never run without one)")
	fs.StringVar(&o.ServerNamespace, "server-namespace", os.Getenv("POD_NAMESPACE"), "kube: the server's own namespace, refused for sandboxes (env POD_NAMESPACE)")
	fs.StringVar(&o.ServiceAccount, "service-account", "sandbox-pod", "kube: service account of the sandbox pods (its token is never mounted)")
	fs.StringVar(&o.StorageClass, "storage-class", "", "kube: StorageClass of project volumes (default: the cluster's)")
	fs.Func("cluster-cidr", "kube: a CIDR of the cluster (its pod or service range, its nodes' or apiserver's addresses) that no sandbox's egress policy reaches, on top of what the server can read from the cluster; repeatable", func(v string) error {
		if _, err := parseCIDRs([]string{v}); err != nil {
			return err
		}
		o.ClusterCIDRs = append(o.ClusterCIDRs, v)
		return nil
	})
	fs.StringVar(&o.PushRepo, "image-push", "", "kube: a repository the cluster pulls from, where snapshots of sandboxes are pushed (default: none, snapshots refused)")
	fs.BoolVar(&o.PushResolve, "image-push-resolve", false, "kube: resolve --image-push's host to its address once at the start, and push and pull by the address (a Service's name, which nodes cannot resolve, to its ClusterIP: the chart's own registry)")
	fs.BoolVar(&o.NoEgressGateway, "no-egress-gateway", false, "kube: run no egress gateway (by default, with --runner-image, a Deployment of that image in the sandbox namespace: every pod's resolver, and the proxy that holds policies' domain rules); domain rules are then refused")
	fs.StringVar(&o.GatewayDNS, "egress-gateway-dns", "", "kube: the upstream resolver (ip[:port]) the egress gateway asks; default: its pod's own (the cluster's DNS)")
	fs.StringVar(&o.RunnerImage, "runner-image", "", "kube: the server's own image, which holds the runner at "+RunnerInImage+": an init container of it puts the runner on a read-only volume of each pod, which reads a snapshot's changes (default: none, snapshots refused)")
}

// Validate checks the options without a cluster.
func (o Options) Validate() error {
	if o.Namespace == "" {
		return errors.New("--namespace is required with --runtime kube")
	}
	// A pod without a RuntimeClass runs on the node's default handler —
	// runc, no sandbox at all — so there is no such thing as "none" here.
	if o.RuntimeClass == "" {
		return errors.New("--runtime-class is required with --runtime kube: a sandbox pod without a sandboxing RuntimeClass would run on the node's default runtime (runc)")
	}
	if _, err := parseCIDRs(o.ClusterCIDRs); err != nil {
		return err
	}
	if o.GatewayDNS != "" {
		if _, err := netip.ParseAddrPort(o.GatewayDNS); err != nil {
			if _, err := netip.ParseAddr(o.GatewayDNS); err != nil {
				return fmt.Errorf("--egress-gateway-dns %q: an IP address, with a port or not", o.GatewayDNS)
			}
		}
	}
	if o.PushRepo == "" && o.PushResolve {
		return errors.New("--image-push-resolve resolves --image-push's host: give --image-push too")
	}
	if o.PushRepo != "" {
		if _, err := name.NewRepository(o.PushRepo); err != nil {
			return fmt.Errorf("--image-push %q: %v", o.PushRepo, err)
		}
	}
	_, err := NewScope(o.Namespace, o.ServerNamespace)
	return err
}

// parseCIDRs parses IPv4 CIDRs or addresses (a /32).
func parseCIDRs(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("--cluster-cidr %q: not an IPv4 CIDR or address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("--cluster-cidr %q: IPv4 only (sandboxes have IPv4 egress only)", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Open connects to the cluster of o, and returns the backend once the
// sandbox namespace is isolated (its deny-all NetworkPolicy is in place).
// client-go's own logging (klog, and what it reports as "unhandled") goes
// to log, the latter at debug level.
//
// The hooks say what the server knows of images.
func Open(ctx context.Context, o Options, h Hooks, log *slog.Logger) (*Runtime, error) {
	klog.SetSlogLogger(log.With("component", "client-go"))
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(_ context.Context, err error, msg string, kv ...any) {
		log.Debug("client-go: "+msg, append([]any{"err", err}, kv...)...)
	}}
	scope, err := NewScope(o.Namespace, o.ServerNamespace)
	if err != nil {
		return nil, err
	}
	var rc *rest.Config
	if o.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kube: loading the cluster config: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	classes := map[string]string{sandbox.RuntimeGVisor: o.RuntimeClass}
	// The other runtimes are RuntimeClasses of their own name.
	classes[sandbox.RuntimeKataCLH] = sandbox.RuntimeKataCLH
	classes[sandbox.RuntimeKataFC] = sandbox.RuntimeKataFC
	// The RuntimeClass must exist: the server refuses to start rather than
	// find out from each pod. (A server whose RBAC cannot read
	// RuntimeClasses is told so, and the apiserver's admission still
	// refuses a pod naming one that does not exist.)
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch _, err := client.NodeV1().RuntimeClasses().Get(ictx, o.RuntimeClass, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("kube: RuntimeClass %q does not exist: create it (deploy/kube/runtimeclass.yaml) or pass --runtime-class", o.RuntimeClass)
	case apierrors.IsForbidden(err):
		log.Warn("kube: cannot read RuntimeClasses to check that the one named exists; pods naming a missing one will be refused by the apiserver", "runtimeClass", o.RuntimeClass)
	case err != nil:
		return nil, fmt.Errorf("kube: reading RuntimeClass %q: %w", o.RuntimeClass, err)
	}
	cidrs, err := parseCIDRs(o.ClusterCIDRs)
	if err != nil {
		return nil, err
	}
	rt, err := New(Config{
		Client: client, Rest: rc, Scope: scope, RuntimeClasses: classes,
		ServiceAccount: o.ServiceAccount, StorageClass: o.StorageClass, Image: h.Image, ImageEnv: h.ImageEnv, PullSecret: h.PullSecret, RunnerImage: o.RunnerImage,
		OpenPrivate: h.NetworkPrivate, ClusterNever: ClusterNever(ictx, client, rc, cidrs, log),
		Gateway: !o.NoEgressGateway && o.RunnerImage != "", GatewayDNS: o.GatewayDNS,
	})
	if err != nil {
		return nil, err
	}
	if err := rt.Isolate(ictx); err != nil {
		return nil, err
	}
	if rt.cfg.Gateway {
		if err := rt.ensureGateway(ictx); err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// ResolvePush is repo with its registry's host name replaced by the first
// IPv4 address the resolver gives it (the port and path kept), tried until
// ctx ends: the chart's registry Service, made before the server's pod,
// may take its DNS record a moment later. An address is left as it is.
func ResolvePush(ctx context.Context, repo string, lookup func(context.Context, string) ([]string, error)) (string, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(r.RegistryStr())
	if err != nil {
		host, port = r.RegistryStr(), ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return repo, nil
	}
	for {
		addrs, err := lookup(ctx, host)
		for _, a := range addrs {
			if ip, perr := netip.ParseAddr(a); perr == nil && ip.Is4() {
				h := ip.String()
				if port != "" {
					h = net.JoinHostPort(h, port)
				}
				return h + "/" + r.RepositoryStr(), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("--image-push-resolve: %s has no IPv4 address (%v)", host, err)
		case <-time.After(time.Second):
		}
	}
}
