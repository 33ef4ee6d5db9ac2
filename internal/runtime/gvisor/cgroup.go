package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Every sandbox's cgroup is a child of one parent, /sandbox, whose CPU
// weight (Options.CPUWeight) is low against the host's other work. It keeps
// the control plane — this server, and the `runsc exec` clients of every
// org's commands — ahead of tenant compute when both want the CPU: one org's
// sentries busy with its floods cannot make another org's `exec true` wait
// for a core (measured in BENCHMARKS.md: B's p50 during A's upload and read
// floods 2.4–3.7× idle at a peer's weight, 1.1–1.8× at 10). It is a weight,
// not a cap: on an idle host the sandboxes get every core, up to their
// class quotas.
//
// A level per org under the parent was tried and measured: on this 2-core
// cgroup v1 host, two busy sandboxes of one org beside one of another split
// the cores no differently with it than without (the per-CPU balancing
// dominates), so it is not made.
const cgroupParent = "sandbox"

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// unified reports whether the host runs cgroup v2 alone.
func unified() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// prepareCgroups makes the parent cgroup and sets its CPU weight (1–10000,
// 100 being a peer's; v1's cpu.shares is the same ratio of 1024).
func prepareCgroups(weight int) error {
	if weight < 1 || weight > 10000 {
		return fmt.Errorf("gvisor: cpu weight %d is outside 1–10000", weight)
	}
	dir, file, value := filepath.Join(cgroupRoot, "cpu", cgroupParent), "cpu.shares", strconv.Itoa(max(2, weight*1024/100))
	if unified() {
		// The parent's cpu controller must be enabled from the root.
		if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return fmt.Errorf("gvisor: enable the cpu controller: %w", err)
		}
		dir, file, value = filepath.Join(cgroupRoot, cgroupParent), "cpu.weight", strconv.Itoa(weight)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gvisor: cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("gvisor: cgroup %s: %w", file, err)
	}
	return nil
}

// removeCgroup removes container name's cgroup wherever it is left. runsc
// removes it on a delete, but a start cut short — its runsc killed with its
// context, at a server's shutdown say, before it saved the container's
// state — leaves a cgroup runsc knows nothing of, one per controller. Any
// process of the sandbox that outlived the cut is killed first. A cgroup
// that is not there is no error; another container's is never touched (the
// name is this container's own, checked by newBundle and loadMeta). Two
// seconds in all are given to the killed to exit.
func removeCgroup(name string) error {
	dirs, err := cgroupDirs(name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue // not in this hierarchy, or a link to one done already
		}
		if err := rmCgroup(d, deadline); err != nil {
			errs = append(errs, fmt.Errorf("gvisor: removing the cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupDirs are where container name's cgroup would be: one directory on
// cgroup v2, one per mounted hierarchy on v1 (some of them links to others,
// or not there at all).
func cgroupDirs(name string) ([]string, error) {
	if unified() {
		return []string{filepath.Join(cgroupRoot, cgroupParent, name)}, nil
	}
	hierarchies, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil, fmt.Errorf("gvisor: cgroups: %w", err)
	}
	var dirs []string
	for _, h := range hierarchies {
		dirs = append(dirs, filepath.Join(cgroupRoot, h.Name(), cgroupParent, name))
	}
	return dirs, nil
}

// rmCgroup kills what is left in cgroup dir and removes it, waiting until
// deadline for the killed to exit (a cgroup with tasks is busy). cgroup v2
// kills the whole cgroup at once (cgroup.kill); v1 has no such file, and
// its processes are killed by pid.
func rmCgroup(dir string, deadline time.Time) error {
	self := os.Getpid()
	for {
		if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) != nil {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != self {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
