package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Volumes lists the caller org's project volumes, most recently used first:
// size (its bound, as the disk quota counts it), creation, last use, and the
// live sandbox holding it, if any.
func (s *Service) Volumes(ctx context.Context) ([]store.Project, error) {
	return s.d.Store.Projects(ctx)
}

// VolumeResult says what DeleteVolume did.
type VolumeResult struct {
	Project  string `json:"project"`
	Deleted  bool   `json:"deleted"`
	FreedMiB int64  `json:"freedMiB"`
}

// projectLock serialises a lease of a project with the deletion of its
// volume, so that a volume is never deleted under a sandbox starting on it.
func (s *Service) projectLock(org, project string) func() {
	return s.lock("project\x00" + org + "\x00" + project)
}

// DeleteVolume deletes a project's volume and forgets the project, giving
// its disk back to the org's quota. A project a live (pending, running or
// sleeping) sandbox holds is refused (409, naming it): end it first.
func (s *Service) DeleteVolume(ctx context.Context, project string) (*VolumeResult, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, err
	}
	if err := sandbox.ValidateProject(project); err != nil {
		return nil, err
	}
	unlock := s.projectLock(org, project)
	defer unlock()
	projects, err := s.d.Store.Projects(ctx)
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
	if err := s.d.Runtime.DeleteVolume(ctx, p.Volume); err != nil {
		s.log.Error("deleting a project volume", "project", project, "err", err)
		return nil, sandbox.Wrap(sandbox.KindUnavailable, err, "the volume could not be deleted; try again")
	}
	if _, err := s.d.Store.DropProject(ctx, project, true); err != nil {
		if errors.Is(err, store.ErrProjectLive) {
			return nil, sandbox.Errorf(sandbox.KindConflict, "project %q was leased meanwhile", project)
		}
		return nil, err
	}
	s.log.Info("project volume deleted", "org", org, "project", project, "sizeMiB", p.SizeMiB)
	return &VolumeResult{Project: project, Deleted: true, FreedMiB: p.SizeMiB}, nil
}

// forgetProject drops the record of a project whose volume a purge deleted.
func (s *Service) forgetProject(ctx context.Context, project string) {
	if _, err := s.d.Store.DropProject(ctx, project, false); err != nil && sandbox.KindOf(err) != sandbox.KindNotFound {
		s.log.Error("forgetting a purged project", "project", project, "err", fmt.Sprint(err))
	}
}
