package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// cgroupsOf lists container name's cgroup directories that exist.
func cgroupsOf(t *testing.T, name string) []string {
	t.Helper()
	dirs, err := cgroupDirs(name)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			found = append(found, d)
		}
	}
	return found
}

// TestCutCreateLeavesNoCgroup: a create whose context ends while runsc
// starts the container (a server shut down while its warm pool fills, say:
// runsc is killed before it saves the container's state) leaves no cgroup
// and no process behind, at whatever point it was cut; so does a cgroup
// with a live process that runsc never knew.
func TestCutCreateLeavesNoCgroup(t *testing.T) {
	r := newRuntime(t)
	// The /sandbox parent is the host's: names of this run's own.
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	for i, cut := range []time.Duration{20 * time.Millisecond, 60 * time.Millisecond, 120 * time.Millisecond, 250 * time.Millisecond} {
		name := "sbx-cut" + run + "-" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(context.Background(), cut)
		obj, err := r.Create(ctx, runtime.Spec{
			Name: name, Labels: map[string]string{runtime.LabelSandbox: "cut"}, Image: "exec", Workdir: "/mnt/data",
			Volume: runtime.Volume{Name: "scratch-" + name, Scratch: true}, CPUs: 1, MemoryMiB: 512, Pids: 256, RootfsMiB: 256, FileMiB: 16,
		})
		cancel()
		if err == nil {
			// Started within the cut: an ordinary delete.
			if err := r.Delete(context.Background(), runtime.Ref{Name: obj.Name, UID: obj.UID}); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				t.Fatal(err)
			}
		}
		if left := cgroupsOf(t, name); len(left) > 0 {
			t.Errorf("cut at %s (err %v): cgroups left: %v", cut, err, left)
		}
	}

	// A survivor runsc never knew: a process in a cgroup of that name.
	name := "sbx-cutsurvivor" + run
	dir := filepath.Join(cgroupRoot, "pids", cgroupParent, name)
	if unified() {
		dir = filepath.Join(cgroupRoot, cgroupParent, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { p.Wait(); close(exited) }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p.Pid)), 0); err != nil {
		p.Kill()
		t.Fatal(err)
	}
	if err := removeCgroup(name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		p.Kill()
		t.Fatal("the process in the cgroup was not killed")
	}
	if left := cgroupsOf(t, name); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}
