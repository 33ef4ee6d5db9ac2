// Package service is what the API does, independent of HTTP: lease a sandbox
// through the checks in their stated order, run programs in it, read and
// write its files, renew and end it. It owns no state: rows live in the
// store, containers in the runtime, and both are reached through the narrow
// interfaces below.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/meter"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/ticket"
)

// Store is the part of the store the service needs. Every call is scoped to
// the org in ctx.
type Store interface {
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context, f store.Filter) ([]*sandbox.Sandbox, error)
	LiveInProject(ctx context.Context, project string) (*sandbox.Sandbox, error)
	CountLive(ctx context.Context, class string) (int, error)
	Insert(ctx context.Context, sb *sandbox.Sandbox, liveCap int) error
	SetStatus(ctx context.Context, id string, st sandbox.Status, uid, reason string) error
	SetRuntime(ctx context.Context, id string, st sandbox.Status, name, uid, checkpoint string) error
	Touch(ctx context.Context, id string, at time.Time) error
	SetExpiry(ctx context.Context, id string, at time.Time) error
	Delete(ctx context.Context, id string) error
	AddUsage(ctx context.Context, class string, leases int64, d time.Duration) error
	Usage(ctx context.Context) ([]store.Usage, error)
}

// Meter gates and debits a lease (kind "sandbox"). The refund gives the fee
// back when the lease fails after the gate. A nil Meter is free.
type Meter interface {
	Charge(ctx context.Context, org, kind, class string) (refund func(context.Context) error, err error)
}

// Config holds the service's policy. Zero values are documented per field.
type Config struct {
	// Runtime is the name of what the backend provides (e.g. "gvisor"); it is
	// the default and the only runtime offered. Empty means "gvisor".
	Runtime string
	// Ceiling bounds every lease from its creation; zero means 24 h.
	Ceiling time.Duration
	// ExecTimeout is the default exec timeout; zero means 60 s.
	ExecTimeout time.Duration
	// MaxExecTimeout caps a caller's timeoutSec; zero means 10 min.
	MaxExecTimeout time.Duration
	// ImageReady reports whether an image is built; nil means every image is.
	ImageReady func(name string) error
	// StartTimeout bounds a container start; zero means 60 s.
	StartTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Metrics records leases, live sandboxes and command latency; nil
	// records nothing.
	Metrics *metrics.Metrics
	// Narrator keeps the live logs of named sessions; nil narrates nothing.
	Narrator Narrator
	// Runner is the path inside a sandbox of cmd/sandbox-runner, which runs
	// an interpreter program in one process start; empty runs the same
	// steps as a shell script.
	Runner string
}

// Service implements the sandbox operations.
type Service struct {
	cfg   Config
	store Store
	rt    runtime.Runtime
	meter Meter
	log   *slog.Logger
	cmds  inflight

	tickets *ticket.Book

	locksMu sync.Mutex
	locks   map[string]*sync.Mutex // per sandbox: sleep, wake and end
}

// New returns a Service. meter may be nil (free).
func New(cfg Config, st Store, rt runtime.Runtime, meter Meter, log *slog.Logger) *Service {
	if cfg.Runtime == "" {
		cfg.Runtime = sandbox.RuntimeGVisor
	}
	if cfg.Ceiling <= 0 {
		cfg.Ceiling = sandbox.DefaultCeiling
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = 60 * time.Second
	}
	if cfg.MaxExecTimeout <= 0 {
		cfg.MaxExecTimeout = 10 * time.Minute
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, store: st, rt: rt, meter: meter, log: log, tickets: ticket.New(cfg.Now)}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// LeaseRequest is the body of POST /v1/sandbox.
type LeaseRequest struct {
	Class   string `json:"class,omitempty"`
	Project string `json:"project,omitempty"`
	Image   string `json:"image,omitempty"`
	Runtime string `json:"runtime,omitempty"`
	TTLSec  int64  `json:"ttlSec,omitempty"`
}

// retryAfterCap is the hint given with a 429: exec sandboxes are short.
const retryAfterCap = 30

// Lease runs the lease checks in their stated order — class, image, project
// present, project free, live cap, fee, runtime — each refusing with nothing
// left behind; then writes the row pending, starts the container, and marks
// the row running (or error with the reason, 503).
func (s *Service) Lease(ctx context.Context, req LeaseRequest) (*sandbox.Sandbox, error) {
	sb, err := s.lease(ctx, req)
	class := req.Class
	if _, cerr := sandbox.LookupClass(class); cerr != nil {
		class = "unknown" // a caller's typo must not mint a metric label
	} else if class == "" {
		class = sandbox.ClassExec
	}
	switch {
	case err == nil:
		s.cfg.Metrics.Lease(class, "created")
	case sandbox.KindOf(err) == sandbox.KindUnavailable || sandbox.KindOf(err) == sandbox.KindInternal:
		s.cfg.Metrics.Lease(class, "failed")
	default:
		s.cfg.Metrics.Lease(class, "refused")
	}
	return sb, err
}

func (s *Service) lease(ctx context.Context, req LeaseRequest) (*sandbox.Sandbox, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	class, err := sandbox.LookupClass(req.Class)
	if err != nil {
		return nil, err
	}
	image := req.Image
	if image == "" {
		image = class.Image
	}
	if image != class.Image {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "image %q is not allowed for class %s (allowed: %s)", image, class.Name, class.Image)
	}
	if s.cfg.ImageReady != nil {
		if err := s.cfg.ImageReady(image); err != nil {
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
		live, err := s.store.LiveInProject(ctx, req.Project)
		if err != nil {
			return nil, err
		}
		if live != nil {
			return nil, projectBusy(req.Project, live.ID)
		}
	}
	if class.LiveCapPerOrg > 0 {
		n, err := s.store.CountLive(ctx, class.Name)
		if err != nil {
			return nil, err
		}
		if n >= class.LiveCapPerOrg {
			return nil, capReached(class)
		}
	}
	refund := func(context.Context) error { return nil }
	if s.meter != nil {
		if refund, err = s.meter.Charge(ctx, org, meter.Kind, class.Name); err != nil {
			return nil, err
		}
	}
	// From here on every refusal or failure gives the fee back.
	charged := true
	defer func() {
		if charged {
			if err := refund(ctx); err != nil {
				s.log.Error("refunding a refused lease", "org", org, "class", class.Name, "err", err)
			}
		}
	}()
	rt, err := sandbox.DecideRuntime(req.Runtime, s.cfg.Runtime, []string{s.cfg.Runtime}, req.Project != "")
	if err != nil {
		return nil, err
	}

	now := s.now()
	sb := &sandbox.Sandbox{
		ID: sandbox.NewID(), Org: org, Class: class.Name, Project: req.Project, Status: sandbox.StatusPending,
		Image: image, Runtime: rt, Workdir: class.Workdir, Name: sandbox.NewName(),
		CreatedAt: now, LastUsedAt: now, ExpiresAt: sandbox.ExpiryFor(class, req.TTLSec, now, now, s.cfg.Ceiling),
	}
	sb.Volume = volumeName(org, sb)
	switch err := s.store.Insert(ctx, sb, class.LiveCapPerOrg); {
	case errors.Is(err, store.ErrProjectBusy):
		live, _ := s.store.LiveInProject(ctx, sb.Project)
		id := "another lease"
		if live != nil {
			id = live.ID
		}
		return nil, projectBusy(sb.Project, id)
	case errors.Is(err, store.ErrCapReached):
		return nil, capReached(class)
	case err != nil:
		return nil, err
	}
	log := s.log.With("sandbox", sb.ID, "class", sb.Class)

	// The start must finish (or fail and be recorded) even if the caller
	// hangs up: a half-started container is exactly the orphan to avoid.
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
	defer cancel()
	// The outcome is recorded even when the start used up its time.
	recordCtx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelRecord()
	obj, err := s.rt.Create(startCtx, s.spec(sb, ""))
	if err != nil {
		log.Error("sandbox start failed", "err", err)
		reason := "the sandbox could not be started"
		if uerr := s.store.SetStatus(recordCtx, sb.ID, sandbox.StatusError, "", reason); uerr != nil {
			log.Error("recording start failure", "err", uerr)
		}
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, reason+"; it is kept as "+sb.ID+" with status error")
	}
	if err := s.store.SetStatus(recordCtx, sb.ID, sandbox.StatusRunning, obj.UID, ""); err != nil {
		// The row cannot say running: take the container down again so
		// that nothing runs that no row claims.
		if derr := s.rt.Delete(recordCtx, runtime.Ref{Name: obj.Name, UID: obj.UID}); derr != nil {
			log.Error("removing a container whose row could not be updated", "err", derr)
		}
		return nil, err
	}
	sb.Status, sb.UID = sandbox.StatusRunning, obj.UID
	charged = false
	if err := s.store.AddUsage(recordCtx, sb.Class, 1, 0); err != nil {
		log.Error("recording usage", "err", err)
	}
	s.cfg.Metrics.Live(sb.Class, 1)
	log.Info("sandbox leased", "expiresAt", sb.ExpiresAt)
	return sb, nil
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
	class := sandbox.MustClass(sb.Class)
	return runtime.Spec{
		Name: sb.Name,
		Labels: map[string]string{
			runtime.LabelSandbox:   sb.ID,
			runtime.LabelOrg:       sandbox.Slug(sb.Org),
			runtime.LabelExpiresAt: sb.ExpiresAt.Format(time.RFC3339),
		},
		Image: sb.Image, Runtime: sb.Runtime, Workdir: sb.Workdir,
		Volume: runtime.Volume{Name: sb.Volume, Scratch: sb.Project == "", SizeMiB: class.Limits.VolumeMiB},
		CPUs:   class.Limits.CPUs, MemoryMiB: class.Limits.MemoryMiB, Pids: class.Limits.Pids,
		RootfsMiB: class.Limits.RootfsMiB, FileMiB: class.Limits.FileMiB,
		Restore: restore,
	}
}

func projectBusy(project, id string) error {
	return sandbox.Errorf(sandbox.KindConflict, "project %q already has a live sandbox: %s", project, id)
}

func capReached(c sandbox.Class) error {
	e := sandbox.Errorf(sandbox.KindLimit, "at most %d live %s sandboxes per org: end one or wait", c.LiveCapPerOrg, c.Name)
	e.RetryAfter = retryAfterCap
	return e
}

// Get returns one sandbox of the caller's org.
func (s *Service) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	if !sandbox.ValidID(id) {
		return nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	return s.store.Get(ctx, id)
}

// ListRequest selects a page of the caller's sandboxes.
type ListRequest struct {
	Project string
	Status  string
	Limit   int    // 1..MaxPage; 0 means MaxPage
	Cursor  string // the Next of the previous page
}

// MaxPage bounds one page of a listing.
const MaxPage = 1000

// List returns a page of the caller's sandboxes, newest first, and the
// cursor of the next page ("" on the last).
func (s *Service) List(ctx context.Context, req ListRequest) ([]*sandbox.Sandbox, string, error) {
	st := sandbox.Status(req.Status)
	if req.Status != "" && !st.Known() {
		return nil, "", sandbox.Errorf(sandbox.KindInvalid, "unknown status %q: use pending, running, sleeping or error", req.Status)
	}
	if req.Limit < 0 || req.Limit > MaxPage {
		return nil, "", sandbox.Errorf(sandbox.KindInvalid, "limit must be 1-%d", MaxPage)
	}
	if req.Limit == 0 {
		req.Limit = MaxPage
	}
	f := store.Filter{Project: req.Project, Status: st, Limit: req.Limit + 1}
	if req.Cursor != "" {
		pos, err := ParseCursor(req.Cursor)
		if err != nil {
			return nil, "", err
		}
		f.After = &pos
	}
	list, err := s.store.List(ctx, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > req.Limit {
		list = list[:req.Limit]
		last := list[len(list)-1]
		next = Cursor(store.Position{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return list, next, nil
}

// Cursor encodes a list position for a client to send back.
func Cursor(p store.Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.CreatedAt.UnixMilli(), 10) + "." + p.ID))
}

// ParseCursor reads a cursor from a client: untrusted, and refused (400)
// unless it is exactly what Cursor makes.
func ParseCursor(c string) (store.Position, error) {
	bad := sandbox.Errorf(sandbox.KindInvalid, "cursor is not one this server gave out: pass the \"next\" of the previous page")
	if len(c) > 128 {
		return store.Position{}, bad
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return store.Position{}, bad
	}
	ms, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 || !sandbox.ValidID(id) || strconv.FormatInt(n, 10) != ms {
		return store.Position{}, bad
	}
	return store.Position{CreatedAt: time.UnixMilli(n).UTC(), ID: id}, nil
}

// Renew extends a lease by ttlSec from now (class default when <= 0), never
// past the ceiling counted from creation. A sleeping sandbox is woken.
func (s *Service) Renew(ctx context.Context, id string, ttlSec int64) (*sandbox.Sandbox, error) {
	sb, _, done, err := s.use(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	class, err := sandbox.LookupClass(sb.Class)
	if err != nil {
		return nil, err
	}
	sb.ExpiresAt = sandbox.ExpiryFor(class, ttlSec, s.now(), sb.CreatedAt, s.cfg.Ceiling)
	if err := s.store.SetExpiry(ctx, sb.ID, sb.ExpiresAt); err != nil {
		return nil, err
	}
	return sb, nil
}

func notRunning(sb *sandbox.Sandbox) error {
	if sb.Status == sandbox.StatusPending {
		return sandbox.Errorf(sandbox.KindConflict, "sandbox %s is still starting; try again in a moment", sb.ID)
	}
	return sandbox.Errorf(sandbox.KindConflict, "sandbox %s is %s, not running", sb.ID, sb.Status)
}

// StopResult says what Stop did.
type StopResult struct {
	ID      string `json:"id"`
	Stopped int    `json:"stopped"`
}

// Stop ends the WORK: it cancels every in-flight command of the sandbox
// (each killed inside the sandbox, not only its client), then kills every
// other process a command left behind (background jobs, daemons), and
// answers how many commands it cancelled. The sandbox, its files and its
// lease stay.
func (s *Service) Stop(ctx context.Context, id string) (*StopResult, error) {
	sb, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	n := s.cmds.stop(sb.ID, 15*time.Second)
	if sb.Status == sandbox.StatusRunning {
		killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if err := s.rt.KillAll(killCtx, sb.Name); err != nil {
			s.log.Warn("killing leftover processes", "sandbox", sb.ID, "err", err)
		}
	}
	s.log.Info("sandbox work stopped", "sandbox", sb.ID, "commands", n)
	return &StopResult{ID: sb.ID, Stopped: n}, nil
}

// EndResult says what End did.
type EndResult struct {
	ID     string `json:"id"`
	Ended  bool   `json:"ended"`
	Purged bool   `json:"purged"`
}

// End removes the container and the row. The project volume is kept unless
// purge is set; a scratch volume always dies with its sandbox. If the
// container cannot be removed the row is kept, so that a later end or the
// reaper can finish the job. A sandbox still starting is refused (409): its
// lease call owns it until it answers.
func (s *Service) End(ctx context.Context, id string, purge bool) (*EndResult, error) {
	return s.EndIf(ctx, id, purge, nil)
}

// EndIf is End with a guard evaluated on the current row under the
// sandbox's lock: when the guard says no, nothing happens and the result is
// nil. The reaper uses it so that a lease renewed since its snapshot is
// not ended.
func (s *Service) EndIf(ctx context.Context, id string, purge bool, guard func(*sandbox.Sandbox) bool) (*EndResult, error) {
	if !sandbox.ValidID(id) {
		return nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	unlock := s.lock(id)
	defer unlock()
	sb, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if guard != nil && !guard(sb) {
		return nil, nil
	}
	if sb.Status == sandbox.StatusPending && s.now().Sub(sb.CreatedAt) < s.cfg.StartTimeout+time.Minute {
		return nil, notRunning(sb)
	}
	ctx = context.WithoutCancel(ctx)
	log := s.log.With("sandbox", sb.ID)
	s.cmds.stop(sb.ID, 5*time.Second)
	if sb.Status != sandbox.StatusSleeping && sb.UID != "" {
		err := s.rt.Delete(ctx, runtime.Ref{Name: sb.Name, UID: sb.UID})
		switch {
		case err == nil, errors.Is(err, runtime.ErrNotFound):
		case errors.Is(err, runtime.ErrConflict):
			// The name now belongs to another identity: never touch it.
			log.Warn("runtime object identity changed; not deleting it", "err", err)
		default:
			log.Error("ending sandbox", "err", err)
			return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the sandbox could not be ended; try again")
		}
	}
	var errs []error
	if sb.Checkpoint != "" {
		errs = append(errs, s.rt.DropCheckpoint(ctx, sb.Checkpoint))
	}
	if sb.Project == "" || purge {
		errs = append(errs, s.rt.DeleteVolume(ctx, sb.Volume))
	}
	if err := errors.Join(errs...); err != nil {
		log.Error("dropping the sandbox's storage", "err", err)
		return nil, sandbox.Wrap(sandbox.KindInternal, err, "the sandbox's storage could not be dropped")
	}
	if err := s.store.Delete(ctx, sb.ID); err != nil {
		return nil, err
	}
	if sb.Status == sandbox.StatusRunning || sb.Status == sandbox.StatusSleeping {
		if err := s.store.AddUsage(ctx, sb.Class, 0, s.now().Sub(sb.CreatedAt)); err != nil {
			log.Error("recording usage", "err", err)
		}
	}
	if sb.Status == sandbox.StatusRunning {
		s.cfg.Metrics.Live(sb.Class, -1)
	}
	s.forget(id)
	log.Info("sandbox ended", "purge", purge)
	return &EndResult{ID: sb.ID, Ended: true, Purged: purge && sb.Project != ""}, nil
}

func (s *Service) touch(ctx context.Context, sb *sandbox.Sandbox) {
	if err := s.store.Touch(context.WithoutCancel(ctx), sb.ID, s.now()); err != nil {
		s.log.Warn("stamping last use", "sandbox", sb.ID, "err", err)
	}
}

func validEnvKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func validEnv(env map[string]string) ([]string, error) {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if !validEnvKey(k) {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "env key %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "env %s contains a NUL byte", k)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// Usage returns the caller org's lease count and lease-seconds by class:
// what ended leases recorded, plus the time live leases have run so far.
func (s *Service) Usage(ctx context.Context) ([]store.Usage, error) {
	recorded, err := s.store.Usage(ctx)
	if err != nil {
		return nil, err
	}
	live, err := s.store.List(ctx, store.Filter{Status: sandbox.StatusRunning, Limit: 100000})
	if err != nil {
		return nil, err
	}
	byClass := map[string]store.Usage{}
	for _, u := range recorded {
		byClass[u.Class] = u
	}
	now := s.now()
	for _, sb := range live {
		u := byClass[sb.Class]
		u.Class = sb.Class
		u.LeaseSeconds += now.Sub(sb.CreatedAt).Seconds()
		byClass[sb.Class] = u
	}
	out := make([]store.Usage, 0, len(byClass))
	for _, c := range sandbox.ClassNames() {
		if u, ok := byClass[c]; ok {
			out = append(out, u)
		}
	}
	return out, nil
}
