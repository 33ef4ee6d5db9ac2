// Package runtime defines what the service needs from an isolation backend,
// and nothing else. Its core is what every backend has: create a sandbox
// from a spec, run a program in it over its one channel (exec), stop what
// runs in it, delete it by name AND unique identity, read its status, list
// by label. Checkpoints, forks, root-filesystem diffs, stats, network
// changes and the in-sandbox runner are capabilities: interfaces of their
// own, which a backend has or not (Discover). The gvisor backend drives runsc on this machine; a
// Kubernetes backend drives pods through client-go. Everything above this
// interface is identical for both.
package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/sandbox"
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
	// MemoryKept says the object started from another's memory: a fork
	// that went on from its original's processes (a backend whose Fork
	// copies only files leaves it false).
	MemoryKept bool
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

// Runtime is the core of an isolation backend: what every backend has.
// What only some have are the capabilities below, each an interface of its
// own that a backend implements or not; Discover finds them once, when the
// server is wired, and an absent one is answered for in one place (the
// service's 501), never by a method that says "unsupported".
type Runtime interface {
	// Create starts a sandbox and returns once it runs. On failure it leaves
	// nothing behind; when what runs the sandboxes refused it (no room, an
	// image that cannot be pulled), the error wraps a *StartError.
	Create(ctx context.Context, spec Spec) (Object, error)
	// Exec runs a program and returns nil on exit 0, *ExitError on another
	// exit, or any other error when the channel itself broke. Cancelling ctx
	// kills the program inside, not only the client.
	Exec(ctx context.Context, name string, req ExecRequest) error
	// Stop kills every process in the sandbox but its init, even when the
	// sandbox's user has exhausted its process limit (a fork bomb); the
	// sandbox runs on.
	Stop(ctx context.Context, name string) error
	// Delete removes the object named by ref.Name only if its identity is
	// ref.UID; ErrNotFound and ErrConflict mean stop.
	Delete(ctx context.Context, ref Ref) error
	// Status returns one object, or ErrNotFound.
	Status(ctx context.Context, name string) (Object, error)
	// List returns the objects carrying every label in selector.
	List(ctx context.Context, selector map[string]string) ([]Object, error)
}

// Volumes drops the volumes a backend made for its sandboxes (Spec.Volume);
// a backend never drops one on its own. Every backend has it, but it is not
// the sandboxes' core: the service needs it beside the runtime.
type Volumes interface {
	// DeleteVolume drops a volume. Missing is not an error.
	DeleteVolume(ctx context.Context, name string) error
}

// Backend is a backend as the service holds it: its core and its volumes
// (its capabilities are found with Discover).
type Backend interface {
	Runtime
	Volumes
}

// Checkpointer saves a sandbox's memory (sleep keeps it; wake restores it).
type Checkpointer interface {
	// Checkpoint saves the memory of the object named by ref under key and
	// removes the object, keeping its volume; Create with Spec.Restore=key
	// brings it back under a new name.
	Checkpoint(ctx context.Context, ref Ref, key string) error
	// DropCheckpoint deletes a checkpoint. Missing is not an error.
	DropCheckpoint(ctx context.Context, key string) error
}

// Forker copies a running sandbox, memory and all.
type Forker interface {
	// Fork creates the object spec describes from the memory of the
	// running object ref at this instant — and, when spec's volume is a
	// project volume (which must not exist yet), from a copy of ref's
	// volume of the same instant — while ref runs on. A backend that
	// cannot copy memory copies the workdir's files and says so
	// (Object.MemoryKept false).
	Fork(ctx context.Context, ref Ref, spec Spec) (Object, error)
}

// Differ reads what a sandbox changed in its root filesystem (snapshots).
type Differ interface {
	// RootfsChanges writes what the sandbox changed in its root filesystem
	// (the upper layer of its overlay, not its workdir or /tmp) to w as a
	// tar, deletions as OCI whiteouts.
	RootfsChanges(ctx context.Context, name string, w io.Writer) error
}

// StatsReader reads a sandbox's use as its runtime counts it.
type StatsReader interface {
	Stats(ctx context.Context, name string) (Stats, error)
}

// Networker changes the egress policy of a running sandbox.
type Networker interface {
	// SetNetwork replaces the egress policy of a running sandbox; it takes
	// effect for new connections, and cuts open ones the new policy no
	// longer allows. A sandbox created with no network cannot be given one
	// (its container has no interface): ErrNoNetwork.
	SetNetwork(ctx context.Context, name string, rules *netpolicy.Rules) error
}

// NetworkChecker refuses, before any sandbox is made, a policy the
// backend cannot enforce; its error is the caller's to read.
type NetworkChecker interface {
	CheckNetwork(rules *netpolicy.Rules) error
}

// Runner is the in-sandbox runner (cmd/sandbox-runner at RunnerPath): the
// init that keeps background processes, the port relay of previews and
// the lease credential's writer.
type Runner interface {
	// RunnerPath is where the runner is inside every sandbox.
	RunnerPath() string
}

// Relabeler replaces an object's labels: a sandbox started ahead of its
// lease (internal/warm) is given to its org by taking the org's labels.
// It is no capability a caller sees (the API does not name it): without
// it, every lease starts its own container.
type Relabeler interface {
	// Relabel replaces the labels of the object named by ref.Name, only if
	// its identity is ref.UID (ErrNotFound, ErrConflict); labels must
	// include LabelSandbox, unchanged.
	Relabel(ctx context.Context, ref Ref, labels map[string]string) error
}

// PortForwarder connects to a port on a sandbox's own loopback with no
// process inside: the backend's own forward. It is no capability a caller
// sees: without it, or for a sandbox it cannot forward to
// (ErrNoForward), a preview goes through the runner's relay.
type PortForwarder interface {
	// ForwardPort connects to 127.0.0.1:port inside the sandbox; the
	// connection lives until closed (ctx bounds only its start). Nothing
	// listening there is ErrRefused.
	ForwardPort(ctx context.Context, name string, port int) (net.Conn, error)
}

// ErrNoForward means the backend cannot forward to this sandbox's ports
// (one made before it could, or a runtime it cannot drive in-process).
var ErrNoForward = errors.New("the sandbox's ports cannot be forwarded to")

// ErrRefused means nothing listens on the port inside.
var ErrRefused = errors.New("nothing listens on the port")

// ErrNoNetwork means the sandbox was created with no network interface.
var ErrNoNetwork = errors.New("the sandbox was created with no network")

// Capability names one optional interface, as the API and the tests name it.
type Capability string

// The capabilities, by name.
const (
	CapCheckpoint Capability = "checkpoint"
	CapFork       Capability = "fork"
	CapDiff       Capability = "rootfs-diff"
	CapStats      Capability = "stats"
	CapNetwork    Capability = "network"
	CapRunner     Capability = "runner"
)

// Capabilities are a backend's optional interfaces, each nil when absent.
type Capabilities struct {
	Checkpoint   Checkpointer
	Fork         Forker
	Diff         Differ
	Stats        StatsReader
	Network      Networker
	CheckNetwork NetworkChecker
	Runner       Runner
	// Relabel and Forward are unnamed: nothing a caller can do depends
	// on them.
	Relabel Relabeler
	Forward PortForwarder
}

// Discover finds the capabilities rt implements.
func Discover(rt Runtime) Capabilities {
	var c Capabilities
	c.Checkpoint, _ = rt.(Checkpointer)
	c.Fork, _ = rt.(Forker)
	c.Diff, _ = rt.(Differ)
	c.Stats, _ = rt.(StatsReader)
	c.Network, _ = rt.(Networker)
	c.CheckNetwork, _ = rt.(NetworkChecker)
	c.Runner, _ = rt.(Runner)
	c.Relabel, _ = rt.(Relabeler)
	c.Forward, _ = rt.(PortForwarder)
	return c
}

// Has says whether the capability is there.
func (c Capabilities) Has(n Capability) bool {
	switch n {
	case CapCheckpoint:
		return c.Checkpoint != nil
	case CapFork:
		return c.Fork != nil
	case CapDiff:
		return c.Diff != nil
	case CapStats:
		return c.Stats != nil
	case CapNetwork:
		return c.Network != nil
	case CapRunner:
		return c.Runner != nil
	}
	return false
}

// Names lists the capabilities there, in a fixed order.
func (c Capabilities) Names() []Capability {
	var out []Capability
	for _, n := range []Capability{CapCheckpoint, CapFork, CapDiff, CapStats, CapNetwork, CapRunner} {
		if c.Has(n) {
			out = append(out, n)
		}
	}
	return out
}

// Unsupported is the one answer to a call that needs capability c where
// this server's backend (named backend, e.g. "gvisor") lacks it: 501
// (sandbox.KindUnsupported), "this server's BACKEND backend cannot" and
// what c does. Every part that needs a capability answers with it.
func Unsupported(backend string, c Capability) error {
	return sandbox.Errorf(sandbox.KindUnsupported, "this server's %s backend cannot %s", backend, capabilityDoes[c])
}

// capabilityDoes says what each capability does, for Unsupported.
var capabilityDoes = map[Capability]string{
	CapCheckpoint: "keep a sleeping sandbox's memory",
	CapFork:       "fork a running sandbox: it cannot copy a sandbox's memory",
	CapDiff:       "read a sandbox's filesystem changes, which a snapshot is made of",
	CapStats:      "report a sandbox's CPU, memory and processes",
	CapNetwork:    "change the network of a running sandbox",
	CapRunner:     "run background processes or port previews: its sandboxes have no in-sandbox runner",
}

// Without is c less the named capabilities (a test's backend that lacks
// them, on the fake runtime that has them all).
func (c Capabilities) Without(names ...Capability) Capabilities {
	for _, n := range names {
		switch n {
		case CapCheckpoint:
			c.Checkpoint = nil
		case CapFork:
			c.Fork = nil
		case CapDiff:
			c.Diff = nil
		case CapStats:
			c.Stats = nil
		case CapNetwork:
			c.Network, c.CheckNetwork = nil, nil
		case CapRunner:
			c.Runner = nil
		}
	}
	return c
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
