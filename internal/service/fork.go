package service

import (
	"context"
	"github.com/sandboxd/sandbox/wire"
	"maps"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// ForkRequest is the body of POST /v1/sandbox/{id}/fork, and of the typed
// op and MCP tool fork.
type ForkRequest = wire.ForkRequest

// Fork leases a new sandbox of the same org, class and image that goes on
// from sandbox id's memory and files at this instant — its processes, its
// in-memory files and, for a project sandbox, a copy of its volume under
// a new project — while id runs on. Where the backend cannot copy memory
// (a pod), the fork gets the workdir's files only, and says memoryKept
// false. It passes every check a lease does
// (quotas, fee, headroom) and is then a lease like any other: listed,
// billed, renewed, reaped. Its background processes' records are copied.
func (s *Service) Fork(ctx context.Context, id string, req ForkRequest) (*sandbox.Sandbox, error) {
	src, _, done, err := s.use(ctx, id, true)
	if err != nil {
		return nil, err
	}
	defer done()
	if s.caps.Fork == nil {
		return nil, s.unsupported(runtime.CapFork)
	}
	switch {
	case src.Project != "" && req.Project == "":
		return nil, sandbox.Errorf(sandbox.KindInvalid, "sandbox %s works on project %q: its fork needs a new project (\"project\"), which gets a copy of the volume", src.ID, src.Project)
	case src.Project == "" && req.Project != "":
		return nil, sandbox.Errorf(sandbox.KindInvalid, "sandbox %s has no project: its fork has none either (its files are in its memory)", src.ID)
	}
	meta := req.Metadata
	if meta == nil {
		meta = maps.Clone(src.Metadata)
	}
	sb, err := s.lease(ctx, LeaseRequest{Class: src.Class, Project: req.Project, Image: src.Image, Runtime: src.Runtime,
		TTLSec: req.TTLSec, Metadata: meta, Network: src.Network}, src)
	class := src.Class
	switch {
	case err == nil:
		s.d.Metrics.Lease(class, "forked")
	case sandbox.KindOf(err) == sandbox.KindUnavailable || sandbox.KindOf(err) == sandbox.KindInternal:
		s.d.Metrics.Lease(class, "failed")
	default:
		s.d.Metrics.Lease(class, "refused")
	}
	if err != nil {
		return nil, err
	}
	// The processes' records go with the memory that runs them: a fork of
	// files only has none of them running.
	if !sb.MemoryKept {
		s.log.Info("sandbox forked (files only: the backend copies no memory)", "sandbox", sb.ID, "from", src.ID)
		return sb, nil
	}
	if recs, err := s.d.Store.Processes(ctx, src.ID); err == nil {
		for _, r := range recs {
			r.Sandbox = sb.ID
			if err := s.d.Store.PutProcess(ctx, r); err != nil {
				s.log.Warn("copying a process record to a fork", "sandbox", sb.ID, "err", err)
			}
		}
	}
	s.log.Info("sandbox forked", "sandbox", sb.ID, "from", src.ID)
	return sb, nil
}

// forkStart starts sb's container from from's memory (and, for a
// project, a copy of its volume) at this instant.
func (s *Service) forkStart(ctx context.Context, from, sb *sandbox.Sandbox) (runtime.Object, error) {
	return s.caps.Fork.Fork(ctx, runtime.Ref{Name: from.Name, UID: from.UID}, s.spec(sb, ""))
}
