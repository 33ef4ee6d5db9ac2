package kube

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// A pod the cluster will not run is answered at once, in the cluster's
// words, instead of after the start timeout: the scheduler's Unschedulable
// (capacity or setup), and a container's waiting reasons that do not clear
// by themselves. See judge.

// claimGrace is how long the scheduler may say a project claim is unbound
// before the claim itself is read: the PV controller binds a claim (to a
// waiting volume, or hands it to a provisioner) asynchronously, and the
// scheduler's first look can come before that.
const claimGrace = 3 * time.Second

// secretGrace is how long a pod whose image the kubelet pulled without
// the pod's pull secret is held for the kubelet's next pull (see
// unreadSecret): its back-off is 10 s, then 20.
const secretGrace = 40 * time.Second

// maxMessage bounds the cluster's account in an answer, in characters.
const maxMessage = 300

// Annotations the PV controller puts on a claim a dynamic provisioner is
// making a volume for.
const (
	annProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
)

// unboundClaim is the scheduler's (VolumeBinding's) word for a pod whose
// claim of immediate binding has no volume yet.
const unboundClaim = "unbound immediate PersistentVolumeClaims"

// claimUnseen is the scheduler's word for a pod whose claim it has not
// seen yet (`persistentvolumeclaim "x" not found`): its informer can be
// behind the claim the backend made just before the pod (a fork's, under
// load). Held like an unbound claim: confirmClaim reads the claim itself.
var claimUnseen = regexp.MustCompile(`persistentvolumeclaim "[^"]*" not found`)

// verdict is the cluster's refusal of a pod.
type verdict struct {
	runtime.StartError
	// claim: the scheduler waits for the pod's claim to bind, which a
	// provisioner may still do; confirmClaim decides.
	claim bool
	// unreadSecret: the kubelet pulled the image with no credentials
	// though the pod names a pull secret. The backend makes an org's
	// secret just before its first pod that pulls with it, and the
	// kubelet's cache of secrets can be behind it (seen: "authorization
	// failed: no basic auth credentials" for a second org's first pod,
	// its secret made a moment before); its next pull, after a back-off,
	// reads it. waitRunning holds such a pod for secretGrace.
	unreadSecret bool
}

// pulling: the waiting reasons of a pull that failed, and of the back-off
// before the kubelet's next one.
func pulling(reason string) bool { return reason == "ErrImagePull" || reason == "ImagePullBackOff" }

// stuck reasons of a container that waits for something that will not come
// by itself (an image that cannot be pulled, a bad spec): failing now beats
// a lease hanging until the start timeout. ErrImagePull is the first failed
// pull (the kubelet retries it after a back-off, which rarely helps a
// start that a caller waits for; a caller can retry the lease).
var stuck = map[string]bool{
	"ErrImagePull": true, "ErrImageNeverPull": true, "InvalidImageName": true, "ImagePullBackOff": true,
	"ImageInspectError": true, "ErrImageInspect": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// judge is the cluster's refusal of pod p, or nil while p may still run.
// Its messages are raw: the caller makes them safe (safeText).
func judge(p *corev1.Pod) *verdict {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		code, msg := lastWord(p)
		// The kubelet's admission refuses a pod the node has no room for
		// after all (OutOfcpu, OutOfmemory, OutOfpods): room, again.
		return &verdict{StartError: runtime.StartError{Reason: code, Message: msg, Capacity: strings.HasPrefix(p.Status.Reason, "OutOf")}}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && stuck[w.Reason] {
			return &verdict{
				StartError:   runtime.StartError{Reason: w.Reason, Message: w.Message},
				unreadSecret: w.Reason == "ErrImagePull" && len(p.Spec.ImagePullSecrets) > 0 && strings.Contains(w.Message, "no basic auth credentials"),
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
			continue
		}
		msg := schedulerMessage(c.Message)
		return &verdict{
			StartError: runtime.StartError{Reason: c.Reason, Message: msg, Capacity: shortOfRoom(msg)},
			claim:      strings.Contains(msg, unboundClaim) || claimUnseen.MatchString(msg),
		}
	}
	return nil
}

// schedulerMessage drops the scheduler's account of preemption (which
// sandboxes, having no priority, never do) from its message.
func schedulerMessage(m string) string {
	if i := strings.Index(m, " preemption: "); i >= 0 {
		m = m[:i]
	}
	return strings.TrimSpace(m)
}

// shortOfRoom: the scheduler found a node that lacks a resource the pod
// requests, or pod slots ("1 Insufficient cpu", "1 Too many pods"), so
// sandboxes ending may make room. (On a cluster that grows by an
// autoscaler, the pod it would have grown for is gone by then; the caller's
// retry asks again.)
func shortOfRoom(msg string) bool {
	return strings.Contains(msg, "Insufficient ") || strings.Contains(msg, "Too many pods")
}

// confirmClaim decides a pod the scheduler holds for its unbound claim: nil
// while the claim may still bind (bound meanwhile, or a provisioner is
// making its volume), else the refusal with what the claim lacks — a
// setup's problem, which a retry meets again.
func (r *Runtime) confirmClaim(ctx context.Context, claim string, v *verdict) (*verdict, error) {
	c, err := r.cfg.Client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("kube: reading claim %s: %w", claim, err)
	}
	if c.Status.Phase == corev1.ClaimBound || c.Annotations[annProvisioner] != "" || c.Annotations[annBetaProvisioner] != "" {
		return nil, nil
	}
	out := *v
	out.Capacity = false
	out.Message = strings.TrimRight(v.Message, ". ") + " (" + claimLacks(c) + ")"
	return &out, nil
}

// claimLacks says, briefly (it follows the scheduler's message), why
// nothing binds claim c and what would.
func claimLacks(c *corev1.PersistentVolumeClaim) string {
	if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName == "" {
		return "no StorageClass: the cluster has no default one, so no provisioner makes the claim's volume; the operator adds one, or a PersistentVolume"
	}
	return fmt.Sprintf("no provisioner serves StorageClass %q; the operator fixes it or --storage-class, or adds a PersistentVolume", *c.Spec.StorageClassName)
}

// lastWord is the cluster's own account of a pod that does not run: a
// short code and its message.
func lastWord(p *corev1.Pod) (code, msg string) {
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason, w.Message
		}
		if t := c.State.Terminated; t != nil {
			return t.Reason, strings.TrimSpace(fmt.Sprintf("exit %d: %s", t.ExitCode, t.Message))
		}
	}
	if p.Status.Reason != "" {
		return p.Status.Reason, p.Status.Message
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return c.Reason, c.Message
		}
	}
	return "Phase" + string(p.Status.Phase), ""
}

// reason is lastWord in one string, for the log.
func reason(p *corev1.Pod) string {
	code, msg := lastWord(p)
	return strings.TrimSpace(code + ": " + msg)
}

// Names the cluster's messages may carry that are the backend's, not the
// caller's: pods (sandbox.NewName), project claims, pull secrets, pod
// UIDs and the kubelet's paths (a mount's failure names them).
var internalNames = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`sbx-[A-Za-z0-9_-]*`), "the sandbox's pod"},
	{regexp.MustCompile(`project-[0-9a-f]{8,}`), "the project volume's claim"},
	{regexp.MustCompile(`sandbox-pull-[0-9a-f]+`), "the image's pull secret"},
	{regexp.MustCompile(`/var/lib/kubelet/[^\s"':]*`), "a kubelet path"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "an object"},
}

// safeText is the cluster's message s made fit for an answer: the words
// of redact (the namespace, the node, the pod's name: the operator's
// names, not the caller's) and the backend's object names replaced, control
// and formatting characters (and broken UTF-8) made spaces, spaces
// collapsed, and the result cut to maxMessage characters.
func safeText(s string, redact map[string]string) string {
	s = strings.ToValidUTF8(s, " ")
	s = strings.Map(func(c rune) rune {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) || unicode.IsSpace(c) {
			return ' '
		}
		return c
	}, s)
	for word, with := range redact {
		if word != "" && utf8.ValidString(word) { // s is valid: so is a match of word, whole runes
			s = replaceWord(s, word, with)
		}
	}
	for _, n := range internalNames {
		s = n.re.ReplaceAllLiteralString(s, n.with)
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxMessage {
		s = string([]rune(s)[:maxMessage-1]) + "…"
	}
	return s
}

// replaceWord replaces word in s where it stands as a name of its own
// (not inside a longer name: the namespace "sandboxes" in
// "sandboxes-old" stays).
func replaceWord(s, word, with string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, word)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := i + len(word)
		if (i == 0 || !nameByte(s[i-1])) && (j == len(s) || !nameByte(s[j])) {
			b.WriteString(s[:i])
			b.WriteString(with)
		} else {
			b.WriteString(s[:j])
		}
		s = s[j:]
	}
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_'
}

// refused is v's StartError with its message made safe for pod p.
func (r *Runtime) refused(p *corev1.Pod, v *verdict) *runtime.StartError {
	se := v.StartError
	se.Reason = safeText(se.Reason, nil)
	se.Message = safeText(se.Message, map[string]string{
		p.Name: "the sandbox's pod", r.ns: "the sandbox namespace", p.Spec.NodeName: "its node",
	})
	return &se
}
