// Package kube is the Kubernetes backend of the runtime interface: each
// sandbox is a pod in one namespace (see Scope), under the RuntimeClass of
// its decided runtime, reached only through the pod exec subresource with
// client-go's WebSocket executor — by pod name, never by IP. Project
// volumes are PVCs named per (org, project); scratch is a size-limited
// emptyDir.
//
// Nothing here holds a tenant credential: pods run as a dedicated service
// account with no token mounted, as uid 1000 with every capability
// dropped, and their environment carries nothing secret.
package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// Config configures the backend. Zero values are documented per field.
type Config struct {
	Client kubernetes.Interface // required
	Rest   *rest.Config         // required: the exec subresource needs it
	Scope  Scope                // required (NewScope)
	// RuntimeClasses maps a decided runtime ("gvisor", "kata-clh", ...) to
	// its RuntimeClass name; a runtime absent from the map runs without a
	// runtimeClassName (the node's default handler).
	RuntimeClasses map[string]string
	// ServiceAccount the pods run as (with no token mounted); empty means
	// "sandbox-pod".
	ServiceAccount string
	// Image maps a class image name to the container image; nil means
	// "sandbox/NAME:local".
	Image func(name string) string
	// PullSecret is how a pod of an org (its slug) pulls a pulled image:
	// its reference ("": Image's) and the imagePullSecret it names (""
	// for none: a public registry). Nil: Image's reference, no secret.
	PullSecret func(org, image string) (ref, secret string)
	// RunnerImage is an image holding cmd/sandbox-runner at RunnerInImage
	// (the server's own image): an init container of it copies the runner
	// into a volume in memory that the sandbox's container mounts
	// read-only at runtime.RunnerPath's directory, where it reads what the
	// pod changed (RootfsChanges). Empty means pods have no runner and
	// snapshots are refused: the runner is never copied in through the
	// pod's own, tenant-writable, filesystem.
	RunnerImage string
	// ImageEnv is the environment an image asks for (its config's Env),
	// given to every program of a pod on it; nil means none.
	ImageEnv func(image string) []string
	// StorageClass of project PVCs; empty means the cluster's default.
	StorageClass string
	// StartTimeout bounds a pod's way to Running; zero means 2 minutes.
	StartTimeout time.Duration
	// OpenPrivate are the private ranges the operator opened to policies
	// (--network-private); nil means none: every private range is in every
	// policy's except.
	OpenPrivate []netip.Prefix
	// ClusterNever are the cluster's own ranges and addresses no policy
	// reaches (its pod and service ranges, nodes, apiserver; see
	// ClusterNever); nil means only netpolicy.Never's fixed ranges.
	ClusterNever []netip.Prefix
	// Gateway runs the egress gateway (gateway.go) from RunnerImage, which
	// lets policies have name rules; false refuses them.
	Gateway bool
	// GatewayDNS is the upstream resolver the gateway asks (ip[:port]);
	// empty means its pod's own (the cluster's DNS).
	GatewayDNS string
}

// Runtime is the Kubernetes backend.
type Runtime struct {
	cfg Config
	ns  string

	mu  sync.Mutex
	env map[string]podExec // each pod's environment and runner, as its spec says

	// gatewayIP is the egress gateway's Service address, every pod's
	// resolver (invalid: no gateway); gatewayUp says it was seen ready.
	gatewayIP netip.Addr
	gatewayUp atomic.Bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// New checks cfg and returns the backend.
func New(cfg Config) (*Runtime, error) {
	ns, err := cfg.Scope.Namespace()
	if err != nil {
		return nil, err
	}
	if cfg.Client == nil || cfg.Rest == nil {
		return nil, errors.New("kube: a client and its rest config are required")
	}
	if cfg.ServiceAccount == "" {
		cfg.ServiceAccount = "sandbox-pod"
	}
	if cfg.Image == nil {
		cfg.Image = func(name string) string { return "sandbox/" + name + ":local" }
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	if cfg.Gateway && cfg.RunnerImage == "" {
		return nil, errors.New("kube: the egress gateway runs the server's image: give its runner image")
	}
	return &Runtime{cfg: cfg, ns: ns}, nil
}

const container = "sandbox"

// RunnerInImage is where the runner image holds cmd/sandbox-runner.
const RunnerInImage = "/usr/local/bin/sandbox-runner"

// runnerDir is the directory of runtime.RunnerPath: the runner volume's
// mount, read-only in the sandbox's container.
var runnerDir = path.Dir(runtime.RunnerPath)

// UID and GID every sandbox process runs as.
const uid, gid = 1000, 1000

// initScript is PID 1: it reaps orphans (sh's wait reaps any child), exits
// on TERM and on no other signal. It is sh's, not bash's: a pulled image
// may have no bash.
//
// TERM is how the kubelet stops a pod: an init deaf to it holds the
// pod's end (and Delete's wait) for the kubelet's least grace, two
// seconds, before the kill. From inside, only the sandbox's own code can
// send it, and that code can end its own sandbox anyway.
//
// It first stamps the start (/tmp is the pod's own emptyDir): what has a
// later ctime on the root filesystem is what the sandbox changed.
const initScript = `: > ` + startStamp + `; trap 'exit 0' TERM; trap '' INT HUP; while :; do sleep 86400 & wait; done`

// initArgs is PID 1's command: the runner's init where pods have the
// runner (it keeps the background processes and stamps the start; the
// image needs no shell), else initScript.
func (r *Runtime) initArgs() []string {
	if r.cfg.RunnerImage != "" {
		return []string{runtime.RunnerPath, "init", startStamp}
	}
	return []string{"/bin/sh", "-c", initScript}
}

// startStamp is the file whose ctime is the pod's start.
const startStamp = "/tmp/.sandbox-start"

func mib(n int64) resource.Quantity { return *resource.NewQuantity(n<<20, resource.BinarySI) }

// IsolationPolicy is the NetworkPolicy that cuts every sandbox pod off the
// network, both ways: a gVisor sandbox on one machine has no network
// (--network=none), and a pod must not have more — not another tenant's pod,
// not the apiserver, not the cloud's metadata address.
const IsolationPolicy = "sandbox-isolation"

// Isolate makes sure the namespace's deny-all NetworkPolicy exists. The
// server refuses to start without it. (It is enforced by the cluster's
// network plugin; one without NetworkPolicy support enforces nothing.)
func (r *Runtime) Isolate(ctx context.Context) error {
	np := r.cfg.Client.NetworkingV1().NetworkPolicies(r.ns)
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: runtime.LabelSandbox, Operator: metav1.LabelSelectorOpExists},
		}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		// No rules: nothing in, nothing out.
	}
	cur, err := np.Get(ctx, IsolationPolicy, metav1.GetOptions{})
	switch {
	case err == nil:
		// A policy of that name is only the isolation if it says so: one
		// someone else made (or changed) to select nothing or allow
		// something is put back, never trusted by its name.
		if isolates(cur.Spec) {
			return nil
		}
		cur.Spec = want
		if _, err := np.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("kube: NetworkPolicy %s/%s is not deny-all and could not be made so: %w", r.ns, IsolationPolicy, err)
		}
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("kube: reading NetworkPolicy %s/%s: %w", r.ns, IsolationPolicy, err)
	}
	_, err = np.Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: IsolationPolicy, Namespace: r.ns},
		Spec:       want,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube: creating the deny-all NetworkPolicy %s/%s (sandboxes must not reach the network): %w", r.ns, IsolationPolicy, err)
	}
	return nil
}

// isolates reports whether spec is the deny-all of every sandbox pod: it
// selects each pod with the sandbox label (and no narrower set), covers
// both directions, and allows nothing.
func isolates(spec networkingv1.NetworkPolicySpec) bool {
	sel := spec.PodSelector
	if len(sel.MatchLabels) != 0 || len(sel.MatchExpressions) != 1 {
		return false
	}
	e := sel.MatchExpressions[0]
	if e.Key != runtime.LabelSandbox || e.Operator != metav1.LabelSelectorOpExists || len(e.Values) != 0 {
		return false
	}
	in, out := false, false
	for _, t := range spec.PolicyTypes {
		in = in || t == networkingv1.PolicyTypeIngress
		out = out || t == networkingv1.PolicyTypeEgress
	}
	return in && out && len(spec.Ingress) == 0 && len(spec.Egress) == 0
}

// pod is the pod of spec.
func (r *Runtime) pod(spec runtime.Spec) *corev1.Pod {
	no, yes := false, true
	runnerUID := int64(65532) // the server image's user: neither root nor the sandbox's
	u, g := int64(uid), int64(gid)
	if spec.User != nil {
		u, g = int64(spec.User.UID), int64(spec.User.GID)
	}
	nonRoot := u != 0 // but for an image the operator let run as root
	grace := int64(2)
	// Limits are the class table's: they bound a busy sandbox, as the
	// gVisor backend's cgroups do. Requests are what an idle one uses, so
	// that a node packs idle sandboxes the way one machine does (where
	// admission reads the memory actually free): a twentieth of the CPU
	// limit and an eighth of the memory (at least 128 MiB, the runner,
	// gVisor's sentry and a shell). A node whose busy sandboxes outgrow
	// it evicts by how far each is over its request — the kubelet's
	// answer to shortage, as the host's reserve is the single machine's.
	// Disk is not overcommitted: requests equal the limit.
	limits, requests := corev1.ResourceList{}, corev1.ResourceList{}
	if spec.CPUs > 0 {
		milli := int64(spec.CPUs * 1000)
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(milli/20, min(milli, 10)), resource.DecimalSI)
	}
	if spec.MemoryMiB > 0 {
		limits[corev1.ResourceMemory] = mib(spec.MemoryMiB)
		requests[corev1.ResourceMemory] = mib(min(spec.MemoryMiB, max(spec.MemoryMiB/8, 128)))
	}
	if spec.RootfsMiB > 0 {
		limits[corev1.ResourceEphemeralStorage], requests[corev1.ResourceEphemeralStorage] = mib(spec.RootfsMiB), mib(spec.RootfsMiB)
	}
	work := corev1.VolumeSource{}
	if spec.Volume.Scratch {
		size := mib(max(spec.Volume.SizeMiB, 1))
		work.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: &size}
	} else {
		work.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: spec.Volume.Name}
	}
	tmp := mib(512)
	// The lease credential's directory: in memory, never on the node's
	// disk, and written over exec only (its content is in no spec).
	secret := mib(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: r.ns, Labels: maps.Clone(spec.Labels)},
		Spec: corev1.PodSpec{
			ServiceAccountName:            r.cfg.ServiceAccount,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no, // no service addresses in the environment
			RestartPolicy:                 corev1.RestartPolicyNever,
			Hostname:                      "sandbox",
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &nonRoot, RunAsUser: &u, RunAsGroup: &g, FSGroup: &g,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            container,
				Image:           r.cfg.Image(spec.Image),
				ImagePullPolicy: pullPolicy(r.cfg.Image(spec.Image)),
				Command:         r.initArgs(),
				WorkingDir:      spec.Workdir,
				Env:             envVars(r.podEnv(spec)),
				Resources:       corev1.ResourceRequirements{Requests: requests, Limits: limits},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &nonRoot, RunAsUser: &u, RunAsGroup: &g,
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: spec.Workdir}, {Name: "tmp", MountPath: "/tmp"}, {Name: "credential", MountPath: "/run/sandbox"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "work", VolumeSource: work},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmp}}},
				{Name: "credential", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &secret}}},
			},
		},
	}
	if r.cfg.RunnerImage != "" {
		// The runner, from the server's image, into memory the sandbox
		// reads and runs but cannot write: the tenant's code never
		// replaces what the server executes.
		size := mib(32)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "runner",
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}})
		p.Spec.InitContainers = []corev1.Container{{
			Name:            "runner",
			Image:           r.cfg.RunnerImage,
			ImagePullPolicy: pullPolicy(r.cfg.RunnerImage),
			Command:         []string{RunnerInImage, "install", runtime.RunnerPath},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(10, resource.DecimalSI), corev1.ResourceMemory: mib(32)},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(500, resource.DecimalSI), corev1.ResourceMemory: mib(64)},
			},
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &runnerUID, RunAsGroup: &runnerUID, ReadOnlyRootFilesystem: &yes,
				AllowPrivilegeEscalation: &no,
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "runner", MountPath: runnerDir}},
		}}
		c := &p.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "runner", MountPath: runnerDir, ReadOnly: true})
	}
	if r.gatewayIP.IsValid() {
		// Every pod asks the gateway (which answers a pod of no policy
		// "refused" at once), never the cluster's DNS: the cluster's
		// names are not a sandbox's, and a resolver is a way out.
		p.Spec.DNSPolicy = corev1.DNSNone
		ndots := "1"
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{r.gatewayIP.String()}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}}}
	}
	if spec.Network != nil {
		p.Annotations = map[string]string{AnnotationEgress: policyAnnotation(spec.Network)}
	}
	if rc := r.cfg.RuntimeClasses[spec.Runtime]; rc != "" {
		p.Spec.RuntimeClassName = &rc
	}
	if r.cfg.PullSecret != nil {
		ref, name := r.cfg.PullSecret(spec.Labels[runtime.LabelOrg], spec.Image)
		if ref != "" {
			p.Spec.Containers[0].Image = ref
		}
		if name != "" {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: name}}
		}
	}
	return p
}

// PullSecret keeps a private registry's credentials as an imagePullSecret
// of the sandbox namespace — the node's to read when it pulls, never a
// pod's environment or a sandbox's file — and answers its name: one per
// (org, registry, user), its password the newest the org gave. An org's
// pods name only its own: another org with the same user (a shared
// vendor account) cannot replace or revoke what they pull with.
func (r *Runtime) PullSecret(ctx context.Context, org, registry, user, password string) (string, error) {
	sum := sha256.Sum256([]byte(org + "\x00" + registry + "\x00" + user))
	name := pullSecretPrefix + hex.EncodeToString(sum[:8])
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{registry: map[string]string{
		"username": user, "password": password, "auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
	}}})
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "sandbox", runtime.LabelOrg: org}},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	secrets := r.cfg.Client.CoreV1().Secrets(r.ns)
	_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("kube: keeping the pull secret of %s: %w", registry, err)
	}
	return name, nil
}

// DropPullSecret deletes org's imagePullSecret name (PullSecret's), once
// no image of the org pulls with it. The server may not read secrets back
// (its role creates, updates and deletes them): the name is PullSecret's
// of the org, which only its org's records hold.
func (r *Runtime) DropPullSecret(ctx context.Context, org, name string) error {
	if !strings.HasPrefix(name, pullSecretPrefix) {
		return fmt.Errorf("kube: %q is no pull secret of the server's", name)
	}
	err := r.cfg.Client.CoreV1().Secrets(r.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: deleting the pull secret %s: %w", name, err)
	}
	return nil
}

// pullSecretPrefix begins the name of every imagePullSecret the server keeps.
const pullSecretPrefix = "sandbox-pull-"

// pullPolicy: locally imported images (":local") are never pulled.
func pullPolicy(image string) corev1.PullPolicy {
	if strings.HasSuffix(image, ":local") {
		return corev1.PullNever
	}
	return corev1.PullIfNotPresent
}

// Create ensures the project PVC, creates the pod, waits for Running, and
// gives it its egress NetworkPolicy when spec has one (see network.go). A
// pod that does not get there is deleted, and the error carries the
// cluster's own reason: a *runtime.StartError as soon as the cluster
// refuses it (no room, an unbound claim, an image it cannot pull; see
// judge), else the last status at the start timeout. A policy with domain
// rules the backend cannot hold is refused before anything is made
// (CheckNetwork).
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Object, error) {
	if spec.Restore != "" { // no Checkpointer: the service never asks
		return runtime.Object{}, errors.New("kube: this backend keeps no checkpoints to restore")
	}
	if err := r.CheckNetwork(spec.Network); err != nil {
		return runtime.Object{}, err
	}
	if !spec.Volume.Scratch {
		if err := r.ensureClaim(ctx, spec.Volume); err != nil {
			return runtime.Object{}, err
		}
	}
	created, err := r.cfg.Client.CoreV1().Pods(r.ns).Create(ctx, r.pod(spec), metav1.CreateOptions{})
	if err != nil {
		err = fmt.Errorf("kube: creating pod: %w", err)
		if !apierrors.IsAlreadyExists(err) && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			if derr := r.dropUncertain(ctx, spec); derr != nil {
				err = fmt.Errorf("%w (and removing the pod it may have stored: %v)", err, derr)
			}
		}
		return runtime.Object{}, err
	}
	ref := runtime.Ref{Name: created.Name, UID: string(created.UID)}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	claim := ""
	if !spec.Volume.Scratch {
		claim = spec.Volume.Name
	}
	p, err := r.waitRunning(wctx, created.Name, claim)
	if err == nil && spec.Network != nil && r.gatewayIP.IsValid() {
		err = r.gatewayReady(wctx)
	}
	if err == nil && spec.Network != nil {
		if nerr := r.applyNetwork(wctx, p, spec.Network); nerr != nil {
			err = nerr
		}
	}
	if err != nil {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer dcancel()
		if derr := r.Delete(dctx, ref); derr != nil && !errors.Is(derr, runtime.ErrNotFound) {
			err = fmt.Errorf("%w (and removing the pod: %v)", err, derr)
		}
		return runtime.Object{}, err
	}
	return object(p), nil
}

// dropUncertain deletes the pod of spec that a failed create may have
// stored after all (the server's timeout, a 5xx, a connection cut after
// the request went): its lease fails, and no row would ever claim it.
// Only a pod of this sandbox (its label) is deleted, by its identity.
func (r *Runtime) dropUncertain(ctx context.Context, spec runtime.Spec) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	p, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(dctx, spec.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case p.Labels[runtime.LabelSandbox] != spec.Labels[runtime.LabelSandbox]:
		return nil // not this sandbox's
	}
	if err := r.Delete(dctx, runtime.Ref{Name: p.Name, UID: string(p.UID)}); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	return nil
}

// waitRunning follows the pod until it runs, the cluster refuses it
// (judge: a *runtime.StartError, at once), or ctx ends. claim is the pod's
// project claim, "" for scratch.
//
// It watches, not polls: a poll every 50 ms was 20 requests a second per
// pending lease, from the one client (and rate limiter) every org's calls
// share, and a slow pull holds a lease pending for its whole start
// timeout. A watch is one request per change of the pod, and a read again
// after watchFor of silence.
func (r *Runtime) waitRunning(ctx context.Context, name, claim string) (*corev1.Pod, error) {
	pods := r.cfg.Client.CoreV1().Pods(r.ns)
	var last *corev1.Pod
	var readClaim time.Time // when the claim is read next; zero: not held for it
	var unread *verdict     // a pull without the pod's secret (unreadSecret), held for the next
	var secretBy time.Time  // until then
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	for {
		switch {
		case err == nil:
			last = p
			if running(p) {
				return p, nil
			}
			v := judge(p)
			if v != nil && v.claim && claim != "" {
				if readClaim.IsZero() {
					readClaim = time.Now().Add(claimGrace)
				}
				if time.Now().Before(readClaim) {
					break
				}
				readClaim = time.Now().Add(claimGrace)
				if v, err = r.confirmClaim(ctx, claim, v); err != nil {
					if ctx.Err() != nil {
						break
					}
					return nil, err
				}
			}
			if v != nil && v.unreadSecret && unread == nil {
				secretBy, unread = time.Now().Add(secretGrace), v
			}
			if v != nil && pulling(v.Reason) && unread != nil {
				if time.Now().Before(secretBy) {
					break // held: the kubelet's next pull, with the secret
				}
				if v.Reason == "ImagePullBackOff" {
					v = unread
				}
			}
			if v != nil {
				return nil, fmt.Errorf("kube: pod %s cannot start (%s): %w", name, reason(p), r.refused(p, v))
			}
		case ctx.Err() != nil:
		default:
			return nil, fmt.Errorf("kube: reading pod %s: %w", name, err)
		}
		if ctx.Err() != nil {
			why := "no status yet"
			if last != nil {
				why = reason(last)
			}
			return nil, fmt.Errorf("kube: pod %s did not run within the start timeout: %s", name, why)
		}
		version := ""
		if last != nil {
			version = last.ResourceVersion
		}
		p, err = r.nextPod(ctx, name, version)
	}
}

// watchFor bounds one watch of a starting pod: after it the pod is read
// again (a claim's grace, a watch the server ended).
const watchFor = 2 * time.Second

// nextPod is the pod as it is after its next change from version (or
// after watchFor without one): the watch's event, else a read.
func (r *Runtime) nextPod(ctx context.Context, name, version string) (*corev1.Pod, error) {
	pods := r.cfg.Client.CoreV1().Pods(r.ns)
	wctx, cancel := context.WithTimeout(ctx, watchFor)
	defer cancel()
	secs := int64(watchFor / time.Second)
	w, err := pods.Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: version, TimeoutSeconds: &secs})
	if err != nil {
		// No watch (a version too old, a refusal): read again shortly.
		select {
		case <-wctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return pods.Get(ctx, name, metav1.GetOptions{})
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if p, isPod := ev.Object.(*corev1.Pod); ok && isPod && (ev.Type == watch.Added || ev.Type == watch.Modified) {
			return p, nil
		}
		// The watch's end, a deletion or the server's error: a read says.
	case <-wctx.Done():
	}
	return pods.Get(ctx, name, metav1.GetOptions{})
}

func running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == container {
			return c.State.Running != nil
		}
	}
	return false
}

func object(p *corev1.Pod) runtime.Object {
	return runtime.Object{Name: p.Name, UID: string(p.UID), Labels: p.Labels, Created: p.CreationTimestamp.Time, Running: running(p)}
}

// ensureClaim creates the project's PVC when it does not exist yet, or
// once the one being deleted is gone.
func (r *Runtime) ensureClaim(ctx context.Context, v runtime.Volume) error {
	claims := r.cfg.Client.CoreV1().PersistentVolumeClaims(r.ns)
	for {
		c, err := claims.Get(ctx, v.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return fmt.Errorf("kube: reading claim %s: %w", v.Name, err)
		}
		if c.DeletionTimestamp == nil {
			return nil
		}
		// A claim on its way out (the new project of a lease the cluster
		// had no room for, dropped a moment ago) would hold the pod: it
		// goes once no pod uses it, then it is made anew.
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube: claim %s is still being deleted: %w", v.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v.Name, Namespace: r.ns, Labels: map[string]string{"sandbox.dev/volume": "project"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mib(max(v.SizeMiB, 1))}},
		},
	}
	if r.cfg.StorageClass != "" {
		c.Spec.StorageClassName = &r.cfg.StorageClass
	}
	if _, err := claims.Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube: creating claim %s: %w", v.Name, err)
	}
	return nil
}

// Delete deletes the pod by name with a UID precondition and waits until
// it is gone, and its egress NetworkPolicy (which the garbage collector
// would remove after the pod anyway: it is the pod's). NotFound and
// Conflict (another pod under the name) mean stop.
//
// The grace is the least the apiserver keeps graceful, a second: a pod
// deleted with none leaves the apiserver at once while the node kills its
// containers when it gets to it, so the wait below would end with the
// sandbox still running (writing its project's volume beside the next
// lease's, holding the node's memory). With a grace the kubelet removes
// the pod only after its containers are dead and its volumes unmounted.
func (r *Runtime) Delete(ctx context.Context, ref runtime.Ref) error {
	uid := types.UID(ref.UID)
	grace := int64(1)
	err := r.cfg.Client.CoreV1().Pods(r.ns).Delete(ctx, ref.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, GracePeriodSeconds: &grace,
	})
	if !apierrors.IsConflict(err) {
		// The pod is going (or gone): so goes its policy. A failure here is
		// left to the garbage collector, not the caller's: the pod is what
		// the caller asked about.
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		r.deleteNetwork(nctx, ref.Name, uid)
		cancel()
	}
	switch {
	case apierrors.IsNotFound(err):
		return runtime.ErrNotFound
	case apierrors.IsConflict(err):
		return runtime.ErrConflict
	case err != nil:
		return fmt.Errorf("kube: deleting pod %s: %w", ref.Name, err)
	}
	for {
		p, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.UID != uid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube: pod %s is still terminating: %w", ref.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// List returns the pods of the scope carrying selector's labels.
func (r *Runtime) List(ctx context.Context, selector map[string]string) ([]runtime.Object, error) {
	sel, err := r.cfg.Scope.Selector(selector)
	if err != nil {
		return nil, err
	}
	pods, err := r.cfg.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("kube: listing pods: %w", err)
	}
	out := make([]runtime.Object, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, object(&pods.Items[i]))
	}
	return out, nil
}

// Status reads one pod.
func (r *Runtime) Status(ctx context.Context, name string) (runtime.Object, error) {
	p, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return runtime.Object{}, runtime.ErrNotFound
	}
	if err != nil {
		return runtime.Object{}, fmt.Errorf("kube: reading pod %s: %w", name, err)
	}
	if p.Labels[runtime.LabelSandbox] == "" {
		return runtime.Object{}, runtime.ErrNotFound // not ours
	}
	return object(p), nil
}

// DeleteVolume deletes a project PVC; scratch lives and dies with its pod.
func (r *Runtime) DeleteVolume(ctx context.Context, name string) error {
	if strings.HasPrefix(name, "scratch-") {
		return nil
	}
	err := r.cfg.Client.CoreV1().PersistentVolumeClaims(r.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: deleting claim %s: %w", name, err)
	}
	return nil
}

// This backend is no runtime.Checkpointer (a sleeping pod is deleted and
// started fresh over its volume when woken) and no runtime.Forker (a pod's
// memory cannot be copied).

// Backend is r as the service sees it: a runtime.Differ too when pods have
// the runner (Config.RunnerImage), which reads their changes.
func (r *Runtime) Backend() runtime.Backend {
	if r.cfg.RunnerImage == "" {
		return r
	}
	return withRunner{r}
}

// withRunner is the backend whose pods carry the runner, as their init:
// a runtime.Runner (background processes, previews), a runtime.Differ and
// a runtime.StatsReader.
type withRunner struct{ *Runtime }

// RunnerPath is where a pod has the runner: on its read-only volume.
func (withRunner) RunnerPath() string { return runtime.RunnerPath }

// Stats reads a pod's use from inside (sandbox-runner stats): the
// counters gVisor keeps for the sandbox, which the node's kubelet does
// not serve through the API.
func (w withRunner) Stats(ctx context.Context, name string) (runtime.Stats, error) {
	var out, errb bytes.Buffer
	if err := w.stream(ctx, name, []string{runtime.RunnerPath, "stats"}, false, nil, &out, &errb, nil); err != nil {
		return runtime.Stats{}, fmt.Errorf("kube: reading the stats of %s: %w: %s", name, err, errb.String())
	}
	var s struct {
		CPUSeconds  float64 `json:"cpuSeconds"`
		MemoryBytes int64   `json:"memoryBytes"`
		Processes   int     `json:"processes"`
	}
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		return runtime.Stats{}, fmt.Errorf("kube: the runner's stats of %s: %w", name, err)
	}
	return runtime.Stats{CPUSeconds: s.CPUSeconds, MemoryBytes: s.MemoryBytes, Processes: s.Processes}, nil
}

// RootfsChanges reads what a pod changed in its root filesystem: its
// container's writable layer is the node's, not the API's, so the runner
// (runtime.RunnerPath, on the read-only volume its init container filled
// from RunnerImage) walks the root for entries newer than the start stamp
// (sandbox-runner changes). What was deleted is not seen.
func (w withRunner) RootfsChanges(ctx context.Context, name string, out io.Writer) error {
	r := w.Runtime
	p, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return runtime.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("kube: reading pod %s: %w", name, err)
	}
	workdir, mounted := "/", false
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		if c.WorkingDir != "" {
			workdir = c.WorkingDir
		}
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.Name == "runner" && m.MountPath == runnerDir && m.ReadOnly
		}
	}
	if !mounted {
		return fmt.Errorf("kube: pod %s predates snapshots (it has no runner volume)", name)
	}
	var errb bytes.Buffer
	err = r.stream(ctx, name, []string{runtime.RunnerPath, "changes", startStamp, "/proc", "/sys", "/dev", "/tmp", runnerDir, workdir}, false, nil, out, &errb, nil)
	var exit *runtime.ExitError
	if errors.As(err, &exit) && exit.Code == 3 {
		return fmt.Errorf("kube: pod %s predates snapshots (no start stamp): %s", name, errb.String())
	}
	if err != nil {
		return fmt.Errorf("kube: reading the changes of %s: %w: %s", name, err, errb.String())
	}
	return nil
}

// Stop kills every process of the sandbox user but PID 1 (a namespace's
// init ignores a SIGKILL sent from inside it).
func (r *Runtime) Stop(ctx context.Context, name string) error {
	err := r.stream(ctx, name, []string{"/bin/kill", "-9", "-1"}, false, nil, io.Discard, io.Discard, nil)
	var exit *runtime.ExitError
	if errors.As(err, &exit) {
		return nil // kill also signals itself
	}
	return err
}

// podEnv is the environment of spec's programs: the base, then the
// image's.
func (r *Runtime) podEnv(spec runtime.Spec) []string {
	if r.cfg.ImageEnv == nil {
		return baseEnv
	}
	return runtime.MergeEnv(baseEnv, r.cfg.ImageEnv(spec.Image)...)
}

func envVars(env []string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	return out
}

// podExec is what an exec in a pod starts from: the pod's environment, and
// whether its runner is this server's (its init container ran
// cfg.RunnerImage), which alone is known to read what Exec writes it.
type podExec struct {
	env    []string
	runner bool
}

// execEnv is what an exec in pod name starts from, read from the pod's
// spec once per server process (a pod's spec never changes).
func (r *Runtime) execEnv(ctx context.Context, name string) (podExec, error) {
	r.mu.Lock()
	pe, ok := r.env[name]
	r.mu.Unlock()
	if ok {
		return pe, nil
	}
	p, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return podExec{}, fmt.Errorf("kube: reading pod %s: %w", name, err)
	}
	env := []string{}
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			for _, e := range c.Env {
				env = append(env, e.Name+"="+e.Value)
			}
		}
	}
	pe.env = runtime.MergeEnv(baseEnv, env...)
	for _, c := range p.Spec.InitContainers {
		// A pod started by a server of another version has that server's
		// runner, which may not read the same header (an upgrade): it is
		// driven as a pod without one until it is started again.
		pe.runner = pe.runner || (c.Name == "runner" && r.cfg.RunnerImage != "" && c.Image == r.cfg.RunnerImage)
	}
	r.mu.Lock()
	if r.env == nil {
		r.env = map[string]podExec{}
	}
	if len(r.env) > 10000 {
		clear(r.env) // bounded: a cache, refilled on use
	}
	r.env[name] = pe
	r.mu.Unlock()
	return pe, nil
}

// execWrapper starts an exec: into its directory ($1, when not empty),
// then env(1) with a clean environment — sh's cd and whatever env is on
// the image's PATH, so a pulled image's busybox serves as well as
// coreutils.
const execWrapper = `[ -z "$1" ] || cd "$1" || exit 126; shift; exec env -i "$@"`

// baseEnv is the environment of every exec.
var baseEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/home/user", "USER=user", "LOGNAME=user", "LANG=C.UTF-8", "HOSTNAME=sandbox",
}

// Exec runs a program through the exec subresource, which has no working
// directory, environment or user of its own: with the runner, `sandbox-runner
// exec` sets the first two from a header on stdin (out of the exec URL);
// without it (or with another server's), env(1) does, from the URL (the
// container runs as uid 1000).
// Every exec carries a random SANDBOX_EXEC token in its environment,
// inherited by whatever it starts; cancelling kills every process holding
// the token, inside the pod.
func (r *Runtime) Exec(ctx context.Context, name string, req runtime.ExecRequest) error {
	if len(req.Argv) == 0 {
		return errors.New("kube: empty argv")
	}
	if strings.Contains(req.Argv[0], "=") || strings.HasPrefix(req.Argv[0], "-") {
		return &runtime.ExitError{Code: 127} // env(1) would read it as an assignment or an option
	}
	token := rand.Text()
	pe, err := r.execEnv(ctx, name)
	if err != nil {
		return err
	}
	env := runtime.MergeEnv(pe.env, req.Env...)
	if req.TTY && !hasEnv(env, "TERM") {
		env = append(env, "TERM=xterm-256color")
	}
	env = append(env, "SANDBOX_EXEC="+token)
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil || req.TTY {
		stderr = io.Discard // a terminal has one stream
	}
	var argv []string
	var stdin io.Reader
	tty, resize := req.TTY, req.Resize
	switch {
	case pe.runner && req.TTY:
		// The runner holds the terminal (see cmd/sandbox-runner/tty.go):
		// the command stays out of the URL, and a resize is a frame
		// among the keys, applied in their order. The exec itself is a
		// plain one: the subresource's terminal would apply a resize
		// beside the keys, whenever the node got to it.
		frames := newTTYFrames(ctx, execHeader(req.Dir, env, req.Argv, true), req.Stdin, req.Resize)
		defer frames.stop()
		argv, stdin, tty, resize = []string{runtime.RunnerPath, "exec"}, frames, false, nil
	case pe.runner:
		// The exec URL carries only the runner's name: the command, its
		// directory and its environment (a caller's secrets, often) come
		// first on stdin, out of the apiserver's audit log and of any
		// proxy's (see cmd/sandbox-runner/exec.go).
		argv, stdin = []string{runtime.RunnerPath, "exec"}, execStdin(req.Dir, env, req.Argv, req.Stdin)
	default:
		argv = append(append([]string{"/bin/sh", "-c", execWrapper, "sh", req.Dir}, env...), req.Argv...)
		stdin = req.Stdin
	}
	kill := func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		r.stream(kctx, name, []string{"/bin/sh", "-c", killScript, "SANDBOX_EXEC=" + token}, false, nil, io.Discard, io.Discard, nil)
	}
	err = r.streamKilling(ctx, name, argv, tty, stdin, stdout, stderr, resize, kill)
	if ctx.Err() != nil {
		// The stream is gone; the program may not be. Kill it inside.
		kill()
		return ctx.Err()
	}
	return err
}

// execHeader is what `sandbox-runner exec` reads first on stdin: its length
// in 8 hex digits, then JSON of the directory, environment and argv, and
// whether the runner opens a terminal for the program.
func execHeader(dir string, env, argv []string, tty bool) []byte {
	h, _ := json.Marshal(struct {
		Dir  string   `json:"dir"`
		Env  []string `json:"env"`
		Argv []string `json:"argv"`
		TTY  bool     `json:"tty,omitempty"`
	}{dir, env, argv, tty})
	return append([]byte(fmt.Sprintf("%08x", len(h))), h...)
}

// execStdin is the stdin of `sandbox-runner exec`: the header, then the
// command's own stdin, if it has one.
func execStdin(dir string, env, argv []string, stdin io.Reader) io.Reader {
	rs := []io.Reader{bytes.NewReader(execHeader(dir, env, argv, false))}
	if stdin != nil {
		rs = append(rs, stdin)
	}
	return io.MultiReader(rs...)
}

// ttyFrames is the stdin of a terminal's `sandbox-runner exec`: the header,
// then the terminal's inputs (runtime.TTYInputs: keys and sizes in the
// order sent) as frames — 'd', a 32-bit length and the keys; 'r', 16-bit
// columns and rows; big-endian. It ends (EOF, which the runner takes as its
// caller gone) when the keys do, when ctx ends, or at stop.
type ttyFrames struct {
	pending []byte
	inputs  <-chan runtime.TTYInput
	ctx     context.Context
	stopped chan struct{}
	once    sync.Once
}

func newTTYFrames(ctx context.Context, header []byte, stdin io.Reader, resize <-chan runtime.Size) *ttyFrames {
	f := &ttyFrames{pending: header, ctx: ctx, stopped: make(chan struct{})}
	f.inputs = runtime.TTYInputs(stdin, resize, f.stopped)
	return f
}

func (f *ttyFrames) stop() { f.once.Do(func() { close(f.stopped) }) }

func (f *ttyFrames) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		select {
		case in, ok := <-f.inputs:
			if !ok {
				return 0, io.EOF
			}
			if in.Keys != nil {
				f.pending = binary.BigEndian.AppendUint32(append(f.pending, 'd'), uint32(len(in.Keys)))
				f.pending = append(f.pending, in.Keys...)
			} else {
				f.pending = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(append(f.pending, 'r'), in.Size.Cols), in.Size.Rows)
			}
		case <-f.ctx.Done():
			return 0, io.EOF
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// killScript kills the command an exec started: the processes holding its
// token ($0) in their environment that are in the command's session.
// Whatever the command detached into a session of its own (a tmux server, a
// desktop's X server) is left alone, as the gvisor backend leaves it by
// killing the command's process group.
//
// The command's session is that of the holder the exec started (parent 0:
// its parent is outside the pod's PID namespace). When that holder is
// already gone (a closed terminal's client exits at once), it is NOT the
// oldest holder left (that is a detached tmux server, whose session must
// live): then the holders killed are those whose session's leader is no
// holder any more, i.e. the command's own background jobs. (Fields of
// /proc/PID/stat after the command name: state ppid pgrp session.)
const killScript = `token=$0 holders= sess= pids=" "
for p in /proc/[0-9]*; do
  grep -qxz -- "$token" "$p/environ" 2>/dev/null || continue
  set -- $(sed 's/.*) //' "$p/stat" 2>/dev/null)
  [ $# -ge 4 ] || continue
  pid=${p#/proc/}
  holders="$holders $pid:$4"
  pids="$pids$pid "
  [ "$2" = 0 ] && sess=$4
done
for h in $holders; do
  s=${h#*:}
  if [ -n "$sess" ]; then
    [ "$s" = "$sess" ] || continue
  else
    case "$pids" in *" $s "*) continue ;; esac
  fi
  kill -9 "${h%%:*}" 2>/dev/null
done
exit 0`

func hasEnv(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

// stream runs argv over the exec subresource.
func (r *Runtime) stream(ctx context.Context, name string, argv []string, tty bool, stdin io.Reader, stdout, stderr io.Writer, resize <-chan runtime.Size) error {
	return r.streamKilling(ctx, name, argv, tty, stdin, stdout, stderr, resize, nil)
}

// streamKilling is stream whose command, once ctx ends, is killed by kill
// again while its stream lives on: an exec cancelled while it was being
// set up can start inside after the first kill.
func (r *Runtime) streamKilling(ctx context.Context, name string, argv []string, tty bool, stdin io.Reader, stdout, stderr io.Writer, resize <-chan runtime.Size, kill func()) error {
	u := r.cfg.Client.CoreV1().RESTClient().Post().Resource("pods").Name(name).Namespace(r.ns).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: !tty, TTY: tty,
		}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewWebSocketExecutor(r.cfg.Rest, "GET", u.String())
	if err != nil {
		return fmt.Errorf("kube: exec: %w", err)
	}
	// client-go returns from a cancelled stream while its copiers may still
	// write: the gates hold the caller's writers until then, and drop after.
	gout, gerr := &gate{w: stdout}, &gate{w: stderr}
	defer gout.close()
	defer gerr.close()
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: gout, Tty: tty}
	if !tty {
		opts.Stderr = gerr
	}
	if tty && resize != nil {
		opts.TerminalSizeQueue = sizeQueue{ctx: ctx, c: resize}
	}
	// The stream runs on a context of its own, ended only after a grace
	// once ctx ends: client-go cancelled between making its streams and
	// starting its reader closes the connection under a reader that then
	// never starts, and the streams' goroutines wait forever
	// (remotecommand's StreamWithContext and readDemuxLoop, v0.37). By the
	// grace's end the reader runs, and the cancel unwinds every goroutine.
	// Until then a remote that ends by itself (Exec kills its command
	// inside) ends the stream the ordinary way.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- ex.StreamWithContext(sctx, opts) }()
	select {
	case err = <-done:
		scancel()
	case <-ctx.Done():
		go func() {
			defer scancel()
			grace := time.After(streamGrace)
			for {
				select {
				case <-done:
					return
				case <-grace:
					scancel()
					<-done
					return
				case <-time.After(2 * time.Second):
					if kill != nil {
						kill()
					}
				}
			}
		}()
		return ctx.Err()
	}
	var code utilexec.CodeExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &code):
		return &runtime.ExitError{Code: code.Code}
	case apierrors.IsNotFound(err):
		return runtime.ErrNotFound
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if st, serr := r.Status(sctx, name); errors.Is(serr, runtime.ErrNotFound) || (serr == nil && !st.Running) {
		return runtime.ErrNotFound
	}
	return fmt.Errorf("kube: exec in %s: %w", name, err)
}

// streamGrace is how long a cancelled exec's stream is left to end by
// itself before its connection is closed.
const streamGrace = 20 * time.Second

// gate passes writes to w until closed, then drops them; close waits for a
// write in progress.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.w == nil {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// sizeQueue feeds resizes to the executor until ctx ends.
type sizeQueue struct {
	ctx context.Context
	c   <-chan runtime.Size
}

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s, ok := <-q.c:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Cols, Height: s.Rows}
	case <-q.ctx.Done():
		return nil
	}
}

// Stats: this backend is no runtime.StatsReader yet: the pod's numbers
// live in the metrics API (metrics-server), which the cluster need not run.
