// Package runtime defines what the service needs from an isolation backend,
// and nothing else: create a sandbox from a spec, run a program in it over its
// one channel (exec), delete it by name AND unique identity, list by label,
// and read its status. The gvisor backend drives runsc on this machine; a
// Kubernetes backend drives pods through client-go. Everything above this
// interface is identical for both.
package runtime

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// Label keys stamped on every runtime object. The sweep finds strays by
// LabelSandbox and never by a broader selector.
//
// There is no expiry label: the lease lives in the row, which a renew
// changes, and the sweep's rule (no row claims the object) needs no second
// opinion that would go stale on every renew.
const (
	LabelSandbox = "sandbox.dev/id"  // the sandbox id the object serves
	LabelOrg     = "sandbox.dev/org" // the org's store directory name
)

// ErrNotFound means no object of that name (or of that identity) exists.
var ErrNotFound = errors.New("runtime object not found")

// ErrConflict means the name exists but belongs to another identity: the
// caller must stop, never retry without the precondition.
var ErrConflict = errors.New("runtime object identity does not match")

// ErrUnsupported means the backend cannot do this (checkpoint, say); the
// caller falls back to what it can.
var ErrUnsupported = errors.New("not supported by this runtime")

// Volume describes the directory mounted at the class workdir. A backend
// never deletes a volume on its own: the service drops scratch volumes when
// their sandbox ends, and project volumes on purge.
type Volume struct {
	// Name is deterministic per (org, project), or per sandbox for scratch.
	Name string
	// Scratch volumes belong to one sandbox; project volumes outlive it.
	Scratch bool
	// SizeMiB bounds the volume where the backend can (0 = unbounded).
	SizeMiB int64
}

// RunnerPath is where a backend makes cmd/sandbox-runner available inside
// a sandbox, when it has one.
const RunnerPath = "/.sandbox/runner"

// Spec is everything a backend needs to create a sandbox.
type Spec struct {
	Name      string            // minted per sandbox, never reused
	Labels    map[string]string // must include LabelSandbox
	Image     string            // class image name
	Runtime   string            // the decided runtime (gvisor, kata-clh, ...)
	Workdir   string            // mount point of Volume inside
	Volume    Volume
	CPUs      float64
	MemoryMiB int64
	Pids      int64
	RootfsMiB int64
	FileMiB   int64
	// Restore names a checkpoint (see Checkpoint) to restore memory from;
	// empty starts fresh.
	Restore string
	// User runs the sandbox's programs as this user instead of the
	// backend's (an image's config asked); nil means the backend's.
	User *User
	// Network is the sandbox's egress policy. Nil means no network at all:
	// its own loopback only, no interface. Rules that allow nothing give it
	// an interface that reaches nothing, which SetNetwork can open later.
	Network *netpolicy.Rules
}

// User is a numeric user and group.
type User struct{ UID, GID int }

// Object is a runtime object as the backend sees it.
type Object struct {
	Name    string
	UID     string // unique identity: a recreated name has a different UID
	Labels  map[string]string
	Created time.Time
	Running bool
}

// Ref names one object precisely: by name and by identity.
type Ref struct {
	Name string
	UID  string
}

// Size is a terminal size.
type Size struct{ Cols, Rows uint16 }

// ExecRequest is one program to run inside a sandbox. Stdout and Stderr may
// be nil (discarded). With TTY set, Stderr is merged into Stdout and Resize
// delivers window size changes; the backend copies Stdin until it ends, so a
// TTY caller closes Stdin once Exec has returned.
type ExecRequest struct {
	Argv   []string
	Env    []string // KEY=VALUE
	Dir    string   // absolute, inside
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	TTY    bool
	Resize <-chan Size
	// Root runs the program as the sandbox's root with only the
	// capabilities to own and place files (CAP_CHOWN, CAP_DAC_OVERRIDE,
	// CAP_FOWNER), the sandbox user's ids in $SANDBOX_UID and
	// $SANDBOX_GID and none of the image's environment: for the server's
	// own static programs (writing the lease credential under /run), never
	// a caller's, never a shell. A backend whose programs cannot change
	// user (a pod's securityContext) runs it as the user.
	Root bool
}

// ExitError reports a program that ran and exited non-zero; it is a result,
// not a failure of the channel.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// StartError reports a sandbox its backend was refused by the machinery
// under it (a cluster's scheduler or kubelet) before it ran, in that
// machinery's words, so a caller hears why and whether waiting helps.
// Reason is the short code (Unschedulable, ImagePullBackOff, ...); Message
// is the account, already made safe to show the sandbox's owner by the
// backend: one line, bounded, naming none of the backend's own objects
// (pods, claims, namespace, nodes). Capacity means the cluster lacks the
// room for it now (CPU, memory, pods), which waiting may free; otherwise
// the refusal is the setup's and a retry meets it again.
//
// A backend returns it wrapped (errors.As finds it) with the detail its
// log wants, and, as for any failed Create, leaves nothing behind.
type StartError struct {
	Reason   string
	Message  string
	Capacity bool
}

func (e *StartError) Error() string {
	if e.Message == "" {
		return "start refused: " + e.Reason
	}
	return "start refused: " + e.Reason + ": " + e.Message
}

// Runtime is the isolation backend.
type Runtime interface {
	// Create starts a sandbox and returns once it runs. On failure it leaves
	// nothing behind; when what runs the sandboxes refused it (no room, an
	// image that cannot be pulled), the error wraps a *StartError.
	Create(ctx context.Context, spec Spec) (Object, error)
	// Exec runs a program and returns nil on exit 0, *ExitError on another
	// exit, or any other error when the channel itself broke. Cancelling ctx
	// kills the program inside, not only the client.
	Exec(ctx context.Context, name string, req ExecRequest) error
	// Delete removes the object named by ref.Name only if its identity is
	// ref.UID; ErrNotFound and ErrConflict mean stop.
	Delete(ctx context.Context, ref Ref) error
	// List returns the objects carrying every label in selector.
	List(ctx context.Context, selector map[string]string) ([]Object, error)
	// Status returns one object, or ErrNotFound.
	Status(ctx context.Context, name string) (Object, error)
	// DeleteVolume drops a volume. Missing is not an error.
	DeleteVolume(ctx context.Context, name string) error
	// Checkpoint saves the memory of the object named by ref under key and
	// removes the object, keeping its volume; Create with Spec.Restore=key
	// brings it back under a new name. ErrUnsupported when the backend
	// cannot checkpoint.
	Checkpoint(ctx context.Context, ref Ref, key string) error
	// Fork creates the object spec describes from the memory of the
	// running object ref at this instant — and, when spec's volume is a
	// project volume (which must not exist yet), from a copy of ref's
	// volume of the same instant — while ref runs on. ErrUnsupported when
	// the backend cannot.
	Fork(ctx context.Context, ref Ref, spec Spec) (Object, error)
	// RootfsChanges writes what the sandbox changed in its root filesystem
	// (the upper layer of its overlay, not its workdir or /tmp) to w as a
	// tar, deletions as OCI whiteouts. ErrUnsupported when the backend
	// cannot tell.
	RootfsChanges(ctx context.Context, name string, w io.Writer) error
	// DropCheckpoint deletes a checkpoint. Missing is not an error.
	DropCheckpoint(ctx context.Context, key string) error
	// KillAll kills every process in the sandbox but its init, even when
	// the sandbox's user has exhausted its process limit (a fork bomb).
	KillAll(ctx context.Context, name string) error
	// Stats is the sandbox's use as its runtime counts it, or
	// ErrUnsupported when the backend cannot tell.
	Stats(ctx context.Context, name string) (Stats, error)
	// SetNetwork replaces the egress policy of a running sandbox; it takes
	// effect for new connections. A sandbox created with no network cannot
	// be given one (its container has no interface): ErrUnsupported, as
	// from a backend that cannot enforce the policy's rules.
	SetNetwork(ctx context.Context, name string, rules *netpolicy.Rules) error
}

// Stats is a sandbox's use now, by its runtime's own count.
type Stats struct {
	CPUSeconds  float64 // CPU time since the start
	MemoryBytes int64   // memory in use
	Processes   int     // processes inside, init included
}

// MergeEnv sets each KEY=VALUE of more in env, replacing the key's value
// (a program's getenv finds the first of two), in a new slice.
func MergeEnv(env []string, more ...string) []string {
	out := slices.Clone(env)
	for _, kv := range more {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") }); i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}
