// Package volumes is an org's project volumes: the list (size, creation,
// last use, the live sandbox holding one) and the deletion of one, which
// gives its disk back to the org's quota.
//
// A volume must never be deleted under a sandbox starting on it. The
// deleter owns that rule: Volumes keeps a lock per project, and the
// service's lease of a project takes the same lock (it is handed Volumes
// as its service.ProjectLocks when the server is wired), from before the
// project's row is claimed until the container runs on the volume. The lock
// lives here rather than in the service so that the service exports no lock
// for others to take, and here rather than in a package of its own because
// the deletion is its one other user.
package volumes

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Store is the part of the store the volumes need; every call is scoped to
// the org in ctx.
type Store interface {
	Projects(ctx context.Context) ([]store.Project, error)
	DropProject(ctx context.Context, name string, ifFree bool) (store.Project, error)
}

// Runtime drops a volume the backend made (the runtime's Volumes).
type Runtime interface {
	DeleteVolume(ctx context.Context, name string) error
}

// Result says what Delete did (DELETE /v1/volumes/{project}).
type Result struct {
	Project  string `json:"project"`
	Deleted  bool   `json:"deleted"`
	FreedMiB int64  `json:"freedMiB"`
}

// Volumes lists and deletes project volumes.
type Volumes struct {
	st  Store
	rt  Runtime
	log *slog.Logger

	mu    sync.Mutex
	locks map[string]*lock // by org and project, while held or waited for
}

type lock struct {
	mu   sync.Mutex
	refs int
}

// New is the volumes of st's orgs, made by rt; log nil discards.
func New(st Store, rt Runtime, log *slog.Logger) *Volumes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Volumes{st: st, rt: rt, log: log}
}

// LockProject holds project of org until unlock is called: a lease of the
// project (service.ProjectLocks) and the deletion of its volume are
// serialised. An entry lives only while someone holds or waits for it.
func (v *Volumes) LockProject(org, project string) (unlock func()) {
	key := org + "\x00" + project
	v.mu.Lock()
	if v.locks == nil {
		v.locks = map[string]*lock{}
	}
	l := v.locks[key]
	if l == nil {
		l = &lock{}
		v.locks[key] = l
	}
	l.refs++
	v.mu.Unlock()
	l.mu.Lock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Unlock()
			v.mu.Lock()
			if l.refs--; l.refs == 0 {
				delete(v.locks, key)
			}
			v.mu.Unlock()
		})
	}
}

// List lists the caller org's project volumes, most recently used first:
// size (its bound, as the disk quota counts it), creation, last use, and
// the live sandbox holding it, if any.
func (v *Volumes) List(ctx context.Context) ([]store.Project, error) {
	return v.st.Projects(ctx)
}

// Delete deletes a project's volume and forgets the project, giving its
// disk back to the org's quota. An unknown project is KindNotFound; one a
// live (pending, running or sleeping) sandbox holds is refused
// (KindConflict, naming it): end it first. A volume the backend could not
// delete is KindUnavailable, and the project stays.
func (v *Volumes) Delete(ctx context.Context, project string) (*Result, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	if err := sandbox.ValidateProject(project); err != nil {
		return nil, err
	}
	unlock := v.LockProject(org, project)
	defer unlock()
	projects, err := v.st.Projects(ctx)
	if err != nil {
		return nil, err
	}
	var p *store.Project
	for i := range projects {
		if projects[i].Name == project {
			p = &projects[i]
		}
	}
	switch {
	case p == nil:
		return nil, sandbox.Errorf(sandbox.KindNotFound, "no project %q", project)
	case p.LiveSandbox != "":
		return nil, sandbox.Errorf(sandbox.KindConflict, "project %q is held by live sandbox %s: end it first", project, p.LiveSandbox)
	}
	ctx = context.WithoutCancel(ctx)
	if err := v.rt.DeleteVolume(ctx, p.Volume); err != nil {
		v.log.Error("deleting a project volume", "project", project, "err", err)
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the volume could not be deleted; try again")
	}
	if _, err := v.st.DropProject(ctx, project, true); err != nil {
		if errors.Is(err, store.ErrProjectLive) {
			return nil, sandbox.Errorf(sandbox.KindConflict, "project %q was leased meanwhile", project)
		}
		return nil, err
	}
	v.log.Info("project volume deleted", "org", org, "project", project, "sizeMiB", p.SizeMiB)
	return &Result{Project: project, Deleted: true, FreedMiB: p.SizeMiB}, nil
}
