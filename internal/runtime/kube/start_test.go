package kube

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/runtime"
)

func unschedulable(msg string) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg},
	}}}
}

func waiting(reason, msg string) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
		{Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}},
	}}}
}

// TestJudge: which pods the cluster has refused, why, and whether for
// want of room — in the words kubelets and schedulers of 1.3x use.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name            string
		pod             *corev1.Pod
		refused         bool
		reason, message string
		capacity, claim bool
	}{
		{"scheduling", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, false, "", "", false, false},
		{"creating", waiting("ContainerCreating", ""), false, "", "", false, false},
		{"scheduled", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [sandbox]"},
		}}}, false, "", "", false, false},
		{"no cpu", unschedulable("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."),
			true, "Unschedulable", "0/1 nodes are available: 1 Insufficient cpu.", true, false},
		{"no memory on some, taints on others", unschedulable("0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {gpu: true}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
			true, "Unschedulable", "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {gpu: true}.", true, false},
		{"no pod slots", unschedulable("0/1 nodes are available: 1 Too many pods."), true, "Unschedulable", "0/1 nodes are available: 1 Too many pods.", true, false},
		{"unbound claim", unschedulable("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."),
			true, "Unschedulable", "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.", false, true},
		{"claim not yet seen by the scheduler", unschedulable(`0/1 nodes are available: persistentvolumeclaim "sbx-acme-p1-fork" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.`),
			true, "Unschedulable", `0/1 nodes are available: persistentvolumeclaim "sbx-acme-p1-fork" not found.`, false, true},
		{"affinity", unschedulable("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."),
			true, "Unschedulable", "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.", false, false},
		{"never pulled", waiting("ErrImageNeverPull", `Container image "sandbox/x:local" is not present with pull policy of Never`),
			true, "ErrImageNeverPull", `Container image "sandbox/x:local" is not present with pull policy of Never`, false, false},
		{"pull failed", waiting("ErrImagePull", "rpc error: not found"), true, "ErrImagePull", "rpc error: not found", false, false},
		{"pull back-off", waiting("ImagePullBackOff", `Back-off pulling image "r.example/x"`), true, "ImagePullBackOff", `Back-off pulling image "r.example/x"`, false, false},
		{"config", waiting("CreateContainerConfigError", `secret "s" not found`), true, "CreateContainerConfigError", `secret "s" not found`, false, false},
		{"run", waiting("RunContainerError", "exec format error"), true, "RunContainerError", "exec format error", false, false},
		{"kubelet out of cpu", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Pod was rejected: Node didn't have enough resource: cpu"}},
			true, "OutOfcpu", "Pod was rejected: Node didn't have enough resource: cpu", true, false},
		{"exited", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
			{Name: container, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 127}}},
		}}}, true, "Error", "exit 127:", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.pod)
			if (v != nil) != tc.refused {
				t.Fatalf("refused %v, want %v (%+v)", v != nil, tc.refused, v)
			}
			if v == nil {
				return
			}
			if v.Reason != tc.reason || v.Message != tc.message || v.Capacity != tc.capacity || v.claim != tc.claim {
				t.Errorf("got %q %q capacity %v claim %v\nwant %q %q capacity %v claim %v", v.Reason, v.Message, v.Capacity, v.claim, tc.reason, tc.message, tc.capacity, tc.claim)
			}
		})
	}
}

// TestJudgeUnreadSecret: a pull with no credentials by a pod that names a
// pull secret is held for the kubelet's next pull; without a secret, or
// with credentials the registry refused, it is refused at once.
func TestJudgeUnreadSecret(t *testing.T) {
	const noCreds = `failed to pull and unpack image "127.0.0.1:5000/team/private@sha256:5150": failed to resolve image: pull access denied, repository does not exist or may require authorization: authorization failed: no basic auth credentials`
	withSecret := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "sbx-pull-globex"}}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"secret unread", withSecret(waiting("ErrImagePull", noCreds)), true},
		{"no secret named", waiting("ErrImagePull", noCreds), false},
		{"refused credentials", withSecret(waiting("ErrImagePull", "failed to resolve image: unexpected status from HEAD request: 401 Unauthorized")), false},
		{"not found", withSecret(waiting("ErrImagePull", "rpc error: not found")), false},
	} {
		v := judge(tc.pod)
		if v == nil || v.unreadSecret != tc.want {
			t.Errorf("%s: %+v, want unreadSecret %v", tc.name, v, tc.want)
		}
	}
	if !pulling("ImagePullBackOff") || !pulling("ErrImagePull") || pulling("CreateContainerConfigError") {
		t.Error("pulling: the waits of a pull and its back-off, nothing else")
	}
}

// TestConfirmClaim: a claim held unbound is a refusal (saying what it
// lacks) only when nothing is on its way to bind it.
func TestConfirmClaim(t *testing.T) {
	class := "fast"
	claims := []*corev1.PersistentVolumeClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "no-class", Namespace: "sandboxes"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
		{ObjectMeta: metav1.ObjectMeta{Name: "class", Namespace: "sandboxes"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
		{ObjectMeta: metav1.ObjectMeta{Name: "provisioning", Namespace: "sandboxes", Annotations: map[string]string{annProvisioner: "rancher.io/local-path"}},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: "sandboxes"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}},
	}
	c := fake.NewClientset()
	for _, pvc := range claims {
		if _, err := c.CoreV1().PersistentVolumeClaims("sandboxes").Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runtime{cfg: Config{Client: c}, ns: "sandboxes"}
	v := judge(unschedulable("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: x"))
	for name, want := range map[string]string{"no-class": "no StorageClass", "class": `StorageClass "fast"`, "provisioning": "", "bound": ""} {
		got, err := r.confirmClaim(context.Background(), name, v)
		switch {
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case want == "" && got != nil:
			t.Errorf("%s: refused while it may bind: %+v", name, got)
		case want != "" && (got == nil || !strings.Contains(got.Message, want) || !strings.Contains(got.Message, "unbound immediate PersistentVolumeClaims") || got.Capacity):
			t.Errorf("%s: %+v, want a refusal saying %q", name, got, want)
		case got != nil:
			if m := safeText(got.Message, nil); len([]rune(m)) > maxMessage || m != got.Message {
				t.Errorf("%s: the claim's account does not fit whole: %q", name, m)
			}
		}
	}
	if _, err := r.confirmClaim(context.Background(), "missing", v); err == nil {
		t.Error("a missing claim read without an error")
	}
}

// TestSafeText: a cluster's message in an answer names none of the
// backend's objects, carries no control or formatting characters, and is
// bounded.
func TestSafeText(t *testing.T) {
	redact := map[string]string{"sbx-AbC123": "the sandbox's pod", "sandboxes": "the sandbox namespace", "node-7": "its node", "": "x"}
	for _, tc := range []struct{ in, want string }{
		{"0/1 nodes are available: 1 Insufficient cpu.", "0/1 nodes are available: 1 Insufficient cpu."},
		{`pod sbx-AbC123 in sandboxes on node-7`, `pod the sandbox's pod in the sandbox namespace on its node`},
		{`pod "sbx-Other_9" of sandboxes-old on node-70`, `pod "the sandbox's pod" of sandboxes-old on node-70`},
		{`persistentvolumeclaim "project-0123456789abcdef0123456789abcdef01234567" not found`, `persistentvolumeclaim "the project volume's claim" not found`},
		{`secret "sandbox-pull-0a1b2c3d" not found`, `secret "the image's pull secret" not found`},
		{`MountVolume.SetUp failed for volume "work": mkdir /var/lib/kubelet/pods/1f2e3d4c-aaaa-bbbb-cccc-0123456789ab/volumes/x: denied`,
			`MountVolume.SetUp failed for volume "work": mkdir a kubelet path: denied`},
		{`uid 1f2e3d4c-aaaa-bbbb-cccc-0123456789ab gone`, `uid an object gone`},
		{"line one\nline two\r\n\x1b[31mred\x1b[0m\ttab\u202eevil\u200b \xff end", "line one line two [31mred [0m tab evil end"},
		{"  spaced   out  ", "spaced out"},
	} {
		if got := safeText(tc.in, redact); got != tc.want {
			t.Errorf("safeText(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
	long := safeText(strings.Repeat("é sbx-x ", 200), nil)
	if n := utf8.RuneCountInString(long); n != maxMessage || !strings.HasSuffix(long, "…") || !utf8.ValidString(long) || strings.Contains(long, "sbx-") {
		t.Errorf("a long message: %d characters, %q", n, long)
	}
}

// FuzzSafeText: whatever the cluster says, the answer's form holds.
func FuzzSafeText(f *testing.F) {
	f.Add("0/1 nodes are available: 1 Insufficient cpu.", "sbx-a")
	f.Add("sbx-\x00sbx-sbx-", "sbx-")
	f.Add("Р", "\xa0") // a broken name matched half a rune
	f.Fuzz(func(t *testing.T, s, pod string) {
		got := safeText(s, map[string]string{pod: "the sandbox's pod"})
		if utf8.RuneCountInString(got) > maxMessage || !utf8.ValidString(got) || strings.Contains(got, "sbx-") {
			t.Fatalf("safeText(%q) = %q", s, got)
		}
		for _, c := range got {
			if c < 0x20 || c == 0x7f || c == '\u202e' {
				t.Fatalf("safeText(%q) = %q keeps %U", s, got, c)
			}
		}
	})
}

// TestEnsureClaimWaitsOutADeletion: a claim on its way out (a refused
// lease's new project, dropped a moment ago) is waited out and made anew,
// not taken for the project's.
func TestEnsureClaimWaitsOutADeletion(t *testing.T) {
	now := metav1.Now()
	c := fake.NewClientset(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: "project-1", Namespace: "sandboxes", UID: "old", DeletionTimestamp: &now, Finalizers: []string{"kubernetes.io/pvc-protection"},
	}})
	r := &Runtime{cfg: Config{Client: c}, ns: "sandboxes"}
	go func() {
		time.Sleep(300 * time.Millisecond)
		c.CoreV1().PersistentVolumeClaims("sandboxes").Delete(context.Background(), "project-1", metav1.DeleteOptions{})
	}()
	start := time.Now()
	if err := r.ensureClaim(context.Background(), runtime.Volume{Name: "project-1", SizeMiB: 10}); err != nil {
		t.Fatal(err)
	}
	got, err := c.CoreV1().PersistentVolumeClaims("sandboxes").Get(context.Background(), "project-1", metav1.GetOptions{})
	if err != nil || got.UID == "old" || got.DeletionTimestamp != nil || time.Since(start) < 300*time.Millisecond {
		t.Errorf("the claim after ensureClaim: %+v %v (after %v)", got, err, time.Since(start))
	}

	// One that never goes holds the start no longer than its context.
	c = fake.NewClientset(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "project-2", Namespace: "sandboxes", DeletionTimestamp: &now}})
	r.cfg.Client = c
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.ensureClaim(ctx, runtime.Volume{Name: "project-2"}); err == nil || !strings.Contains(err.Error(), "still being deleted") {
		t.Errorf("a claim that never goes: %v", err)
	}
}

// TestCreateUncertain: a create the API server stored but answered with an
// error (its timeout, a cut connection) deletes the pod it may have made,
// and only a pod of this sandbox: the lease fails, and no row would ever
// claim it. A refusal (the name taken) leaves what is there.
func TestCreateUncertain(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		if err := c.Tracker().Create(corev1.SchemeGroupVersion.WithResource("pods"), obj, "sandboxes"); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewTimeoutError("the request timed out", 1)
	})
	r := &Runtime{cfg: Config{Client: c, StartTimeout: time.Second, Image: func(n string) string { return "sandbox/" + n + ":local" }}, ns: "sandboxes"}
	spec := runtime.Spec{Name: "sbx-uncertain", Labels: map[string]string{runtime.LabelSandbox: "sb_uncertain"}, Image: "exec",
		Volume: runtime.Volume{Name: "scratch-sb_uncertain", Scratch: true}}
	if _, err := r.Create(context.Background(), spec); err == nil {
		t.Fatal("a create answered with a timeout succeeded")
	}
	if _, err := c.CoreV1().Pods("sandboxes").Get(context.Background(), spec.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod the failed create stored is still there: %v", err)
	}
	// Another sandbox's pod of that name (a refusal's, say) stays.
	c = fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: "sandboxes", Labels: map[string]string{runtime.LabelSandbox: "sb_other"}}})
	r.cfg.Client = c
	if err := r.dropUncertain(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("sandboxes").Get(context.Background(), spec.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another sandbox's pod went: %v", err)
	}
}
