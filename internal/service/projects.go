package service

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// projectLock holds project of org while a lease starts a sandbox on its
// volume (see ProjectLocks).
func (s *Service) projectLock(org, project string) func() {
	if s.d.ProjectLocks == nil {
		return s.lock("project\x00" + org + "\x00" + project)
	}
	return s.d.ProjectLocks.LockProject(org, project)
}

// forgetProject drops the record of a project whose volume a purge deleted.
func (s *Service) forgetProject(ctx context.Context, project string) {
	if _, err := s.d.Store.DropProject(ctx, project, false); err != nil && sandbox.KindOf(err) != sandbox.KindNotFound {
		s.log.Error("forgetting a purged project", "project", project, "err", fmt.Sprint(err))
	}
}
