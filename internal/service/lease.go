package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/meter"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/warm"
	"github.com/sandboxd/sandbox/wire"
)

// LeaseRequest is the body of POST /v1/sandbox, and of the typed op and MCP
// tool lease (which embed it).
type LeaseRequest = wire.LeaseRequest

// recordTimeout bounds the store writes that record a start's outcome; it
// starts when the start has ended, so a start that used up its own time
// can still record its failure. A variable for the test that pins this.
var recordTimeout = 30 * time.Second

// Lease runs the lease checks in their stated order — class, image, project
// present, project free, quotas (live per class, projects, disk, CPU,
// memory), fee, runtime, host headroom — each refusing with nothing left
// behind; then writes the row pending, starts the container, and marks the
// row running — or error with the reason (503; the cluster's own, safe
// form, when it refused the start), or, when the cluster had no room for
// it, ends the row as if it had never been (503 with Retry-After).
func (s *Service) Lease(ctx context.Context, req LeaseRequest) (*sandbox.Sandbox, error) {
	if req.Run {
		if err := s.canRun(ctx, req.Image); err != nil {
			return nil, err
		}
	}
	sb, err := s.lease(ctx, req, nil)
	if err == nil && req.Run {
		if _, rerr := s.runImage(ctx, sb); rerr != nil {
			// The lease stands (it is billed and running); the answer says
			// why its command did not start.
			s.log.Warn("the image's command did not start", "sandbox", sb.ID, "err", rerr)
			return sb, sandbox.Wrap(sandbox.KindOf(rerr), rerr, "sandbox "+sb.ID+" is leased, but the image's command did not start: "+sandbox.Message(rerr))
		}
	}
	class := req.Class
	if _, cerr := sandbox.LookupClass(class); cerr != nil {
		class = "unknown" // a caller's typo must not mint a metric label
	} else if class == "" {
		class = sandbox.ClassExec
	}
	switch {
	case err == nil:
		s.d.Metrics.Lease(class, "created")
	case sandbox.KindOf(err) == sandbox.KindUnavailable || sandbox.KindOf(err) == sandbox.KindInternal:
		s.d.Metrics.Lease(class, "failed")
	default:
		s.d.Metrics.Lease(class, "refused")
	}
	return sb, err
}

// lease is Lease, or with from set, a fork of the running sandbox from:
// the same checks, then the new container restored from from's memory
// (forkStart) instead of started fresh.
func (s *Service) lease(ctx context.Context, req LeaseRequest, from *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	class, err := sandbox.LookupClass(req.Class)
	if err != nil {
		return nil, err
	}
	if err := sandbox.CheckMetadata(req.Metadata); err != nil {
		return nil, err
	}
	network, err := s.networkPolicy(req.Network)
	if err != nil {
		return nil, err
	}
	public, err := s.publicPorts(req.PublicPorts)
	if err != nil {
		return nil, err
	}
	image := req.Image
	if image == "" {
		image = class.Image
	}
	if image != class.Image && !(from != nil && image == from.Image) {
		if image, err = s.resolveImage(ctx, class, image); err != nil {
			return nil, err
		}
	}
	if s.d.ImageReady != nil {
		if err := s.d.ImageReady(image); err != nil {
			var se *sandbox.Error
			if errors.As(err, &se) {
				return nil, err // the checker said it for the caller
			}
			return nil, sandbox.Wrap(sandbox.KindInvalid, err, fmt.Sprintf("image %q of class %s is not built on this server: the operator runs `sandbox image build %s`", image, class.Name, image))
		}
	}
	if class.NeedsProject && req.Project == "" {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "class %s needs a project: its volume is the project's", class.Name)
	}
	if req.Project != "" {
		if err := sandbox.ValidateProject(req.Project); err != nil {
			return nil, err
		}
		live, err := s.d.Store.LiveInProject(ctx, req.Project)
		if err != nil {
			return nil, err
		}
		if live != nil {
			return nil, projectBusy(req.Project, live.ID)
		}
	}
	// The quotas: live sandboxes of the class (exec's 16 → 429), then a
	// new project's count and disk (403), then the CPU and memory the
	// start reserves (429). Checked here read-only, in the stated order,
	// and again inside the insert's transaction.
	pol, err := s.policy(ctx, org)
	if err != nil {
		return nil, err
	}
	ask := func(newProject bool) quota.Ask {
		return quota.Ask{Class: class.Name, Start: true, NewSandbox: true, NewProject: newProject}
	}
	use, newProject, err := s.d.Store.Use(ctx, req.Project)
	if err != nil {
		return nil, err
	}
	if from != nil && from.Project != "" && !newProject {
		return nil, sandbox.Errorf(sandbox.KindConflict, "project %q exists: a fork of a project sandbox needs a new project, which gets a copy of the volume", req.Project)
	}
	if err := quota.Check(pol, use, ask(newProject)); err != nil {
		return nil, quota.Refusal(err)
	}
	refund := func(context.Context) error { return nil }
	if s.d.Meter != nil {
		if refund, err = s.d.Meter.Charge(ctx, org, meter.Kind, class.Name); err != nil {
			return nil, err
		}
	}
	// From here on every refusal or failure gives the fee back, even when
	// the caller has hung up.
	charged := true
	defer func() {
		if charged {
			if err := refund(context.WithoutCancel(ctx)); err != nil {
				s.log.Error("refunding a refused lease", "org", org, "class", class.Name, "err", err)
			}
		}
	}()
	rt, err := sandbox.DecideRuntime(req.Runtime, s.d.RuntimeName, []string{s.d.RuntimeName}, req.Project != "")
	if err != nil {
		return nil, err
	}
	if err := s.admitHost(ctx, class); err != nil {
		return nil, err
	}

	now := s.now()
	sb := &sandbox.Sandbox{
		ID: sandbox.NewID(), Org: org, Class: class.Name, Project: req.Project, Status: sandbox.StatusPending,
		Image: image, Runtime: rt, Workdir: class.Workdir, Name: sandbox.NewName(),
		CreatedAt: now, LastUsedAt: now, ExpiresAt: sandbox.ExpiryFor(class, req.TTLSec, now, now, s.cfg.Ceiling),
		Metadata: req.Metadata, Network: network, PublicPorts: public,
	}
	// A plain lease may take a sandbox started ahead of it: its id and
	// name become the row's; it is relabelled for the org once the row
	// names it (adoptWarm).
	var warmed runtime.Object
	isWarm := false
	if from == nil {
		warmed, isWarm = s.takeWarm(ctx, sb)
	}
	if isWarm {
		// Until its row is written the pool still holds it, for the sweep.
		defer s.d.Warm.Settled(warmed.Name)
	}
	sb.Volume = volumeName(org, sb)
	admit := func(u quota.Use, newProject bool) error { return quota.Check(pol, u, ask(newProject)) }
	if sb.Project != "" {
		// Until the container runs on the volume, the volume is not
		// deleted under it (internal/volumes takes the same lock).
		unlock := s.projectLock(org, sb.Project)
		defer unlock()
	}
	switch err := s.d.Store.Insert(ctx, sb, admit); {
	case errors.Is(err, store.ErrProjectBusy):
		live, _ := s.d.Store.LiveInProject(ctx, sb.Project)
		id := "another lease"
		if live != nil {
			id = live.ID
		}
		return nil, projectBusy(sb.Project, id)
	case err != nil:
		err = quota.Refusal(err) // a racing lease took the room
		if isWarm {
			s.dropWarm(warmed)
		}
		return nil, err
	}
	log := s.log.With("sandbox", sb.ID, "class", sb.Class)

	// The start must finish (or fail and be recorded) even if the caller
	// hangs up: a half-started container is exactly the orphan to avoid.
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
	var obj runtime.Object
	switch {
	case isWarm:
		obj, err = s.adoptWarm(startCtx, sb, warmed)
	case from == nil:
		obj, err = s.d.Runtime.Create(startCtx, s.spec(sb, ""))
	default:
		obj, err = s.forkStart(startCtx, from, sb)
	}
	cancel()
	// The outcome is recorded under a deadline of its own, counted from
	// now: the start may have used up all of its time.
	recordCtx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	if says, room := clusterSays(err); room {
		// Nothing runs, and the caller is told to come back: the row ends
		// (an error row would hold no quota, only wait for the reaper and
		// crowd the caller's list), the fee is refunded (charged is still
		// set), and a project this lease made goes with its volume, so
		// that the retry makes (and seeds) it anew and the projects and
		// disk quotas do not count a project nothing ever ran on.
		log.Warn("the cluster has no room for the sandbox", "err", err)
		if uerr := s.transition(recordCtx, sb, moved(sb, sandbox.StatusEnded)); uerr != nil {
			log.Error("removing the row of a lease the cluster had no room for", "err", uerr)
		} else if newProject && from == nil {
			s.dropNewProject(recordCtx, sb)
		}
		e := sandbox.Wrap(sandbox.KindUnavailable, err, "the cluster cannot place the sandbox now: "+says+"; retry later")
		e.RetryAfter = retryAfterCapacity
		return nil, e
	}
	if err != nil {
		log.Error("sandbox start failed", "err", err)
		reason := "the sandbox could not be started"
		if says, _ := clusterSays(err); says != "" {
			reason += ": the cluster says: " + says
		}
		next := moved(sb, sandbox.StatusError)
		next.Error = reason
		if uerr := s.transition(recordCtx, sb, next); uerr != nil {
			log.Error("recording start failure", "err", uerr)
		}
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, reason+"; it is kept as "+sb.ID+" with status error")
	}
	next := moved(sb, sandbox.StatusRunning)
	next.UID = obj.UID
	if err := s.transition(recordCtx, sb, next); err != nil {
		// The row cannot say running: take the container down again so
		// that nothing runs that no row claims.
		if derr := s.d.Runtime.Delete(recordCtx, runtime.Ref{Name: obj.Name, UID: obj.UID}); derr != nil {
			log.Error("removing a container whose row could not be updated", "err", derr)
		}
		return nil, err
	}
	charged = false
	if from != nil {
		sb.Forked, sb.MemoryKept = true, obj.MemoryKept
	}
	if from == nil && (sb.Project == "" || newProject) { // never over a project's files
		if err := s.seed(recordCtx, sb); err != nil {
			log.Warn("the image's workdir was not copied in", "err", err)
		}
	}
	s.d.Credentials.Hand(recordCtx, sb, from != nil)
	if err := s.d.Store.AddUsage(recordCtx, sb.Class, 1, 0); err != nil {
		log.Error("recording usage", "err", err)
	}
	log.Info("sandbox leased", "expiresAt", sb.ExpiresAt, "warm", isWarm)
	return sb, nil
}

// clusterSays is the safe account of the refusal err wraps (a
// *runtime.StartError: what runs the sandboxes refused to start one), and
// whether it is for want of room; "" when err is no refusal.
func clusterSays(err error) (says string, room bool) {
	var se *runtime.StartError
	if !errors.As(err, &se) {
		return "", false
	}
	msg := strings.TrimRight(se.Message, ". ")
	switch {
	case se.Capacity && msg != "":
		return msg, true
	case msg == "":
		return se.Reason, se.Capacity
	}
	return se.Reason + ": " + msg, false
}

// dropNewProject forgets the project sb's lease made and deletes its
// volume, when nothing ever ran on it: the volume first, so that a
// failure keeps the record that names it (and the caller can delete it).
// (On Kubernetes a pre-made PersistentVolume the claim had bound to is
// released by this, as by a purge; a provisioner's volume goes with it.)
func (s *Service) dropNewProject(ctx context.Context, sb *sandbox.Sandbox) {
	log := s.log.With("sandbox", sb.ID, "project", sb.Project)
	if err := s.d.Runtime.DeleteVolume(ctx, sb.Volume); err != nil {
		log.Error("deleting the volume of a project no sandbox ran on", "err", err)
		return
	}
	if _, err := s.d.Store.DropProject(ctx, sb.Project, true); err != nil {
		log.Error("forgetting a project no sandbox ran on", "err", err)
	}
}

// volumeName is the runtime volume of sb: per sandbox for scratch, or per
// (org, project), hashed together in full so that no two pairs share one.
func volumeName(org string, sb *sandbox.Sandbox) string {
	if sb.Project == "" {
		return "scratch-" + sb.ID
	}
	sum := sha256.Sum256([]byte(org + "\x00" + sb.Project))
	return "project-" + hex.EncodeToString(sum[:20])
}

// spec is the runtime spec of sb: its class limits, labels and volume, and
// the checkpoint to restore from, if any.
func (s *Service) spec(sb *sandbox.Sandbox, restore string) runtime.Spec {
	return specOf(sb, s.specUser(sb), restore)
}

// labels are the runtime labels of sb.
func labels(sb *sandbox.Sandbox) map[string]string {
	return map[string]string{runtime.LabelSandbox: sb.ID, runtime.LabelOrg: sandbox.Slug(sb.Org)}
}

// WarmSpec is the spec a lease of class would make on its class image
// with no project and no network, on the runtime named rt, for a sandbox
// of id and name started ahead of its lease (internal/warm): labelled
// warm.Label and no org's until the lease takes it (takeWarm).
func WarmSpec(class sandbox.Class, rt string) warm.Spec {
	return func(id, name string) runtime.Spec {
		sb := &sandbox.Sandbox{ID: id, Name: name, Class: class.Name, Image: class.Image, Runtime: rt, Workdir: class.Workdir}
		sb.Volume = volumeName("", sb)
		spec := specOf(sb, nil, "")
		spec.Labels = map[string]string{runtime.LabelSandbox: id, warm.Label: "1"}
		return spec
	}
}

// takeWarm gives sb a sandbox started ahead of it, when its lease is one
// WarmSpec makes: sb takes its id and name. False leaves sb as it was, to
// start its own.
func (s *Service) takeWarm(ctx context.Context, sb *sandbox.Sandbox) (runtime.Object, bool) {
	if s.d.Warm == nil || s.caps.Relabel == nil || sb.Project != "" || sb.Network != nil || sb.Runtime != s.d.RuntimeName {
		return runtime.Object{}, false
	}
	if sb.Image != sandbox.MustClass(sb.Class).Image {
		return runtime.Object{}, false
	}
	w, ok := s.d.Warm.Take(sb.Class, sb.Image)
	if !ok {
		return runtime.Object{}, false
	}
	// One that waited long may have died meanwhile (the host's OOM killer,
	// say): it is asked, at a control call's cost, not handed out dead.
	if time.Since(w.Ready) > warmAskAfter {
		if o, err := s.d.Runtime.Status(ctx, w.Object.Name); err != nil || !o.Running {
			s.log.Warn("a warm sandbox died while it waited; the lease starts its own", "name", w.Object.Name, "err", err)
			s.dropWarm(w.Object)
			s.d.Warm.Settled(w.Object.Name)
			return runtime.Object{}, false
		}
	}
	sb.ID, sb.Name = w.ID, w.Object.Name
	return w.Object, true
}

// warmAskAfter is how long a warm sandbox waits before its lease asks
// whether it still runs: one just started is handed out as it is.
const warmAskAfter = 10 * time.Second

// adoptWarm gives the warm sandbox o to sb, whose row names it now: its
// labels become sb's. One that cannot be relabelled is deleted, and the
// lease fails like a start that failed. (A server killed between the row
// and the relabel leaves a pending row on a warm-labelled object, which
// the recovery relabels before the pool purges what is labelled warm.)
func (s *Service) adoptWarm(ctx context.Context, sb *sandbox.Sandbox, o runtime.Object) (runtime.Object, error) {
	if err := s.caps.Relabel.Relabel(ctx, runtime.Ref{Name: o.Name, UID: o.UID}, labels(sb)); err != nil {
		s.dropWarm(o)
		return runtime.Object{}, fmt.Errorf("giving a warm sandbox its labels: %w", err)
	}
	o.Labels = labels(sb)
	return o, nil
}

// dropWarm deletes a warm sandbox its lease did not keep, in the
// background (the caller's answer does not wait for it).
func (s *Service) dropWarm(o runtime.Object) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.d.Runtime.Delete(ctx, runtime.Ref{Name: o.Name, UID: o.UID}); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			s.log.Error("deleting a warm sandbox its lease did not keep", "name", o.Name, "err", err)
		}
	}()
}

// specOf is the runtime spec of sb, its user given.
func specOf(sb *sandbox.Sandbox, user *runtime.User, restore string) runtime.Spec {
	class := sandbox.MustClass(sb.Class)
	return runtime.Spec{
		Name:   sb.Name,
		Labels: labels(sb),
		Image:  sb.Image, Runtime: sb.Runtime, Workdir: sb.Workdir,
		Volume: runtime.Volume{Name: sb.Volume, Scratch: sb.Project == "", SizeMiB: class.Limits.VolumeMiB},
		CPUs:   class.Limits.CPUs, MemoryMiB: class.Limits.MemoryMiB, Pids: class.Limits.Pids,
		RootfsMiB: class.Limits.RootfsMiB, FileMiB: class.Limits.FileMiB,
		Restore: restore,
		User:    user,
		Network: networkRules(sb),
	}
}

// specUser is the user of sb's image for its spec; an image that could no
// longer say (its files gone) gets the backend's, and its start fails on
// the missing rootfs instead.
func (s *Service) specUser(sb *sandbox.Sandbox) *runtime.User {
	u, err := s.imageUser(sb.Image)
	if err != nil {
		return nil
	}
	return u
}

func projectBusy(project, id string) error {
	return sandbox.Errorf(sandbox.KindConflict, "project %q already has a live sandbox: %s", project, id)
}
