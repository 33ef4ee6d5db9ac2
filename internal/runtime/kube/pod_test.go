package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandbox/internal/runtime"
)

func TestPodSpec(t *testing.T) {
	r := &Runtime{cfg: Config{RuntimeClasses: map[string]string{"gvisor": "gvisor"}, ServiceAccount: "sandbox-pod",
		Image: func(n string) string { return "sandbox/" + n + ":local" }}, ns: "sandboxes"}
	spec := runtime.Spec{
		Name: "sbx-a", Image: "dev", Runtime: "gvisor", Workdir: "/work",
		Labels: map[string]string{runtime.LabelSandbox: "sb_x", runtime.LabelOrg: "acme-1234"},
		Volume: runtime.Volume{Name: "project-abc", SizeMiB: 100}, CPUs: 2, MemoryMiB: 4096, RootfsMiB: 2048,
	}
	p := r.pod(spec)
	c := p.Spec.Containers[0]
	switch {
	case p.Name != "sbx-a" || p.Namespace != "sandboxes":
		t.Errorf("name %s/%s", p.Namespace, p.Name)
	case p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor":
		t.Errorf("runtime class %v", p.Spec.RuntimeClassName)
	case *p.Spec.AutomountServiceAccountToken || p.Spec.ServiceAccountName != "sandbox-pod" || *p.Spec.EnableServiceLinks:
		t.Errorf("service account / links")
	case p.Spec.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("restart %s", p.Spec.RestartPolicy)
	case !*c.SecurityContext.RunAsNonRoot || *c.SecurityContext.RunAsUser != 1000 || *c.SecurityContext.AllowPrivilegeEscalation ||
		len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL":
		t.Errorf("security context %+v", c.SecurityContext)
	case c.Resources.Limits.Cpu().MilliValue() != 2000 || c.Resources.Requests.Cpu().MilliValue() != 100 ||
		c.Resources.Limits.Memory().Value() != 4<<30 || c.Resources.Requests.Memory().Value() != 512<<20 ||
		c.Resources.Limits.StorageEphemeral().Value() != 2<<30:
		t.Errorf("resources %+v", c.Resources)
	case p.Spec.Volumes[0].PersistentVolumeClaim == nil || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "project-abc":
		t.Errorf("work volume %+v", p.Spec.Volumes[0])
	case p.Labels[runtime.LabelSandbox] != "sb_x" || p.Labels[runtime.LabelOrg] != "acme-1234" || len(p.Labels) != 2:
		t.Errorf("labels %v", p.Labels)
	case c.ImagePullPolicy != corev1.PullNever:
		t.Errorf("pull policy %s", c.ImagePullPolicy)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s comes from elsewhere", e.Name)
		}
	}

	// Scratch: a size-limited emptyDir; a runtime without a class: none.
	spec.Volume, spec.Runtime = runtime.Volume{Name: "scratch-sb_x", Scratch: true, SizeMiB: 512}, "runc"
	p = r.pod(spec)
	if ed := p.Spec.Volumes[0].EmptyDir; ed == nil || ed.SizeLimit.Value() != 512<<20 {
		t.Errorf("scratch %+v", p.Spec.Volumes[0])
	}
	if p.Spec.RuntimeClassName != nil {
		t.Errorf("a runtime without a class got %q", *p.Spec.RuntimeClassName)
	}
}

// TestPodRunner: with a runner image, an init container of it (not of
// the tenant's image, not as the sandbox's user) fills a volume in memory
// that the sandbox's container mounts read-only where the runner is run
// from; without one, a pod has no runner at all.
func TestPodRunner(t *testing.T) {
	r := &Runtime{cfg: Config{Image: func(n string) string { return "tenant/" + n }, RunnerImage: "sandbox/server:1"}, ns: "sandboxes"}
	p := r.pod(runtime.Spec{Name: "sbx-a", Image: "x", Workdir: "/work", Volume: runtime.Volume{Scratch: true}})
	if len(p.Spec.InitContainers) != 1 {
		t.Fatalf("init containers: %+v", p.Spec.InitContainers)
	}
	ic := p.Spec.InitContainers[0]
	if ic.Image != "sandbox/server:1" || ic.Command[0] != RunnerInImage || *ic.SecurityContext.RunAsUser == uid || !*ic.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("the runner's init container: %+v", ic)
	}
	var vol *corev1.Volume
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == "runner" {
			vol = &p.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.EmptyDir == nil || vol.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("the runner's volume: %+v", vol)
	}
	n := 0
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.Name == "runner" {
			n++
			if !m.ReadOnly || m.MountPath+"/runner" != runtime.RunnerPath {
				t.Errorf("the sandbox's runner mount: %+v", m)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d runner mounts in the sandbox", n)
	}
	// The runner is PID 1: the image needs no shell.
	if cmd := p.Spec.Containers[0].Command; len(cmd) != 3 || cmd[0] != runtime.RunnerPath || cmd[1] != "init" || cmd[2] != startStamp {
		t.Errorf("PID 1 with a runner: %q", cmd)
	}
	r.cfg.RunnerImage = ""
	if p := r.pod(runtime.Spec{Name: "sbx-a", Image: "x", Workdir: "/work", Volume: runtime.Volume{Scratch: true}}); len(p.Spec.InitContainers) != 0 || len(p.Spec.Volumes) != 3 {
		t.Errorf("without a runner image: %+v %+v", p.Spec.InitContainers, p.Spec.Volumes)
	} else if p.Spec.Containers[0].Command[0] != "/bin/sh" {
		t.Errorf("PID 1 without a runner: %q", p.Spec.Containers[0].Command)
	}
}

// TestPodRequestsPack: requests are sized for idle sandboxes, so one org's
// exec cap of idle exec sandboxes (16) fits a 2-core node's CPU; limits
// stay the class's.
func TestPodRequestsPack(t *testing.T) {
	r := &Runtime{cfg: Config{Image: func(n string) string { return n }}, ns: "s"}
	p := r.pod(runtime.Spec{Name: "a", Image: "exec", Workdir: "/w", Volume: runtime.Volume{Scratch: true}, CPUs: 1, MemoryMiB: 1024})
	res := p.Spec.Containers[0].Resources
	if cpu := res.Requests.Cpu().MilliValue(); 16*cpu > 1000 {
		t.Errorf("16 idle exec sandboxes request %dm of CPU", 16*cpu)
	}
	if res.Limits.Cpu().MilliValue() != 1000 || res.Limits.Memory().Value() != 1<<30 || res.Requests.Memory().Value() != 128<<20 {
		t.Errorf("resources %+v", res)
	}
}
