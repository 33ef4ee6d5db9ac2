// Package fake is an in-memory runtime.Runtime for unit tests of pure
// service logic: objects, volumes and checkpoints are map entries, and
// every failure a real backend can report has a knob (a start that fails or
// uses up its time, exit codes, a broken channel, a sandbox that dies, an
// identity conflict, no checkpoint support).
//
// It is never the evidence that a feature works on a runtime: that is what
// the integration suites against runsc and a real cluster are for. It
// exists so that the lease checks, the transitions and the reaper can be
// table-tested in milliseconds without root. (golang/build pairs its
// buildlet client with a fake the same way.)
package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/runtime"
)

// ErrBroken is what Exec answers for a channel that broke.
var ErrBroken = errors.New("fake: the exec channel broke")

// ExecFunc runs a program in the object named name; nil means every
// program exits 0 at once. It must honour ctx (a cancel kills the program).
type ExecFunc func(ctx context.Context, name string, req runtime.ExecRequest) error

// Runtime is the fake backend. Its knobs may be set between calls; they are
// read under its lock.
type Runtime struct {
	mu          sync.Mutex
	objs        map[string]*runtime.Object
	specs       map[string]runtime.Spec
	volumes     map[string]bool
	checkpoints map[string]bool
	uid         int
	calls       []string

	// Now stamps Created; nil means time.Now.
	Now func() time.Time
	// CreateErr, when set, fails every Create with it (nothing is left).
	CreateErr error
	// CreateWait makes Create wait until its context ends and fail with
	// the context's error: a start that uses up its time.
	CreateWait bool
	// RestoreErr fails a Create that restores a checkpoint.
	RestoreErr error
	// Program runs what Exec is asked to; nil exits 0.
	Program ExecFunc
	// DeleteErr fails every Delete with it.
	DeleteErr error
	// CheckpointErr fails Checkpoint with it (the object stays).
	CheckpointErr error
	// StatsErr fails Stats with it.
	StatsErr error
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns an empty fake.
func New() *Runtime {
	return &Runtime{objs: map[string]*runtime.Object{}, specs: map[string]runtime.Spec{},
		volumes: map[string]bool{}, checkpoints: map[string]bool{}}
}

func (r *Runtime) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runtime) call(format string, args ...any) {
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

// Create starts an object from spec.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Object, error) {
	r.mu.Lock()
	r.call("create %s", spec.Name)
	wait, cerr := r.CreateWait, r.CreateErr
	if spec.Restore != "" {
		if !r.checkpoints[spec.Restore] {
			cerr = errors.Join(cerr, fmt.Errorf("fake: no checkpoint %q", spec.Restore))
		}
		cerr = errors.Join(cerr, r.RestoreErr)
	}
	r.mu.Unlock()
	if wait {
		<-ctx.Done()
		return runtime.Object{}, ctx.Err()
	}
	if cerr != nil {
		return runtime.Object{}, cerr
	}
	if _, ok := spec.Labels[runtime.LabelSandbox]; !ok {
		return runtime.Object{}, errors.New("fake: spec without the sandbox label")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.objs[spec.Name]; ok {
		return runtime.Object{}, fmt.Errorf("fake: name %s is taken", spec.Name)
	}
	r.uid++
	o := &runtime.Object{Name: spec.Name, UID: fmt.Sprintf("uid-%d", r.uid), Labels: maps.Clone(spec.Labels), Created: r.now(), Running: true}
	r.objs[spec.Name] = o
	r.specs[spec.Name] = spec
	r.volumes[spec.Volume.Name] = true
	return *o, nil
}

// Relabel replaces an object's labels (runtime.Relabeler).
func (r *Runtime) Relabel(ctx context.Context, ref runtime.Ref, labels map[string]string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("relabel %s", ref.Name)
	o, ok := r.objs[ref.Name]
	switch {
	case !ok:
		return runtime.ErrNotFound
	case o.UID != ref.UID:
		return runtime.ErrConflict
	case labels[runtime.LabelSandbox] != o.Labels[runtime.LabelSandbox]:
		return errors.New("fake: relabel must keep the sandbox label")
	}
	o.Labels = maps.Clone(labels)
	return nil
}

// Exec runs a program through the Program knob.
func (r *Runtime) Exec(ctx context.Context, name string, req runtime.ExecRequest) error {
	r.mu.Lock()
	r.call("exec %s", name)
	o, ok := r.objs[name]
	f := r.Program
	r.mu.Unlock()
	if !ok || !o.Running {
		return fmt.Errorf("%w: no running container %s", ErrBroken, name)
	}
	if f == nil {
		return ctx.Err()
	}
	return f(ctx, name, req)
}

// Delete removes the object named by ref if its identity matches.
func (r *Runtime) Delete(ctx context.Context, ref runtime.Ref) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("delete %s", ref.Name)
	if r.DeleteErr != nil {
		return r.DeleteErr
	}
	o, ok := r.objs[ref.Name]
	switch {
	case !ok:
		return runtime.ErrNotFound
	case ref.UID != "" && o.UID != ref.UID:
		return runtime.ErrConflict
	}
	delete(r.objs, ref.Name)
	return nil
}

// List returns the objects carrying every label of selector (an empty
// value matches any value).
func (r *Runtime) List(ctx context.Context, selector map[string]string) ([]runtime.Object, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runtime.Object
	for _, o := range r.objs {
		match := true
		for k, v := range selector {
			got, ok := o.Labels[k]
			if !ok || v != "" && got != v {
				match = false
			}
		}
		if match {
			out = append(out, *o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Status returns one object, or ErrNotFound.
func (r *Runtime) Status(ctx context.Context, name string) (runtime.Object, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.objs[name]
	if !ok {
		return runtime.Object{}, runtime.ErrNotFound
	}
	return *o, nil
}

// DeleteVolume drops a volume; missing is not an error.
func (r *Runtime) DeleteVolume(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("delete-volume %s", name)
	delete(r.volumes, name)
	return nil
}

// Checkpoint saves the object's "memory" under key and removes it.
func (r *Runtime) Checkpoint(ctx context.Context, ref runtime.Ref, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("checkpoint %s", ref.Name)
	switch {
	case r.CheckpointErr != nil:
		return r.CheckpointErr
	}
	o, ok := r.objs[ref.Name]
	if !ok || o.UID != ref.UID {
		return runtime.ErrNotFound
	}
	delete(r.objs, ref.Name)
	r.checkpoints[key] = true
	return nil
}

// Fork creates spec's object as a copy of the running object ref.
func (r *Runtime) Fork(ctx context.Context, ref runtime.Ref, spec runtime.Spec) (runtime.Object, error) {
	r.mu.Lock()
	r.call("fork %s", ref.Name)
	var err error
	switch o, ok := r.objs[ref.Name]; {
	case r.CheckpointErr != nil:
		err = r.CheckpointErr
	case !ok || o.UID != ref.UID:
		err = runtime.ErrNotFound
	}
	r.mu.Unlock()
	if err != nil {
		return runtime.Object{}, err
	}
	obj, err := r.Create(ctx, spec)
	obj.MemoryKept = err == nil // as gVisor's: from the original's memory
	return obj, err
}

// The fake is no runtime.Differ: it has no root filesystem to tell of.

// DropCheckpoint deletes a checkpoint; missing is not an error.
func (r *Runtime) DropCheckpoint(ctx context.Context, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("drop-checkpoint %s", key)
	delete(r.checkpoints, key)
	return nil
}

// Stop records the call.
func (r *Runtime) Stop(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("killall %s", name)
	if _, ok := r.objs[name]; !ok {
		return runtime.ErrNotFound
	}
	return nil
}

// Die makes an object's sandbox die under it: the object is gone, as when
// the host's memory cgroup kills a gVisor sandbox.
func (r *Runtime) Die(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.objs, name)
}

// Halt marks an object as not running without removing it.
func (r *Runtime) Halt(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.objs[name]; ok {
		o.Running = false
	}
}

// Put places an object as if a backend had made it (for recover and sweep
// tests), with the sandbox label of id.
func (r *Runtime) Put(name, uid, id string, created time.Time, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objs[name] = &runtime.Object{Name: name, UID: uid, Labels: map[string]string{runtime.LabelSandbox: id}, Created: created, Running: running}
}

// Objects lists the object names, sorted.
func (r *Runtime) Objects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.objs)
}

// Volumes lists the volume names, sorted.
func (r *Runtime) Volumes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.volumes)
}

// Checkpoints lists the checkpoint keys, sorted.
func (r *Runtime) Checkpoints() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.checkpoints)
}

// Spec returns the spec an object was created from.
func (r *Runtime) Spec(name string) (runtime.Spec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.specs[name]
	return s, ok
}

// Calls returns the calls made so far, in order ("create NAME", ...).
func (r *Runtime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// SetExec sets the Program knob under the lock.
func (r *Runtime) SetExec(f ExecFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Program = f
}

// Set changes knobs under the lock.
func (r *Runtime) Set(f func(r *Runtime)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Exit is an ExecFunc whose every program exits code after writing out to
// its stdout.
func Exit(code int, out string) ExecFunc {
	return func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if req.Stdout != nil && out != "" {
			req.Stdout.Write([]byte(out))
		}
		if code != 0 {
			return &runtime.ExitError{Code: code}
		}
		return nil
	}
}

// Block is an ExecFunc whose every program runs until its context ends
// (a cancel or a deadline kills it, like a real backend's).
func Block(started chan<- struct{}) ExecFunc {
	return func(ctx context.Context, name string, req runtime.ExecRequest) error {
		if started != nil {
			started <- struct{}{}
		}
		<-ctx.Done()
		return ctx.Err()
	}
}

// Stats answers the knob StatsErr, else a sandbox of one process.
func (r *Runtime) Stats(ctx context.Context, name string) (runtime.Stats, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.StatsErr != nil {
		return runtime.Stats{}, r.StatsErr
	}
	if _, ok := r.objs[name]; !ok {
		return runtime.Stats{}, runtime.ErrNotFound
	}
	return runtime.Stats{CPUSeconds: 0.1, MemoryBytes: 1 << 20, Processes: 1}, nil
}

// SetNetwork records the policy on the spec of a sandbox created with one.
func (r *Runtime) SetNetwork(ctx context.Context, name string, rules *netpolicy.Rules) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	spec, ok := r.specs[name]
	if !ok {
		return runtime.ErrNotFound
	}
	if spec.Network == nil {
		return runtime.ErrNoNetwork
	}
	spec.Network = rules
	r.specs[name] = spec
	return nil
}
