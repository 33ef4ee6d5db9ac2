package service

import (
	"context"
	"errors"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/warm"
)

// RecoverResult counts what Recover found.
type RecoverResult struct {
	Adopted int // running (or half-started) sandboxes whose container runs
	Lost    int // rows whose container is gone: now sleeping, files kept
	Failed  int // half-started leases whose container never ran: now error
}

// Recover reconciles the rows of the org in ctx with the runtime after a
// server start. Containers outlive the server, so a running row whose
// container still runs is simply adopted, and a lease interrupted between
// starting its container and recording it is completed. A row whose
// container is gone (a host reboot, a crash of the sandbox) is put to sleep
// without memory: its volume is intact and the next use wakes it. objs is
// the runtime's view, listed once for every org.
//
// The live gauge starts from the org's running rows and then follows the
// transitions Recover makes, so after every org is recovered it counts
// what runs.
func (s *Service) Recover(ctx context.Context, objs map[string]runtime.Object) (RecoverResult, error) {
	var res RecoverResult
	rows, err := s.d.Store.List(ctx, store.Filter{Limit: 1 << 30})
	if err != nil {
		return res, err
	}
	for _, sb := range rows {
		if sb.Status == sandbox.StatusRunning {
			s.d.Metrics.Live(sb.Class, 1)
		}
	}
	var errs []error
	for _, sb := range rows {
		obj, ok := objs[sb.Name]
		alive := ok && obj.Running
		log := s.log.With("sandbox", sb.ID)
		switch sb.Status {
		case sandbox.StatusRunning:
			if alive && obj.UID == sb.UID {
				res.Adopted++
				continue
			}
			if ok {
				errs = append(errs, ignoreGone(s.d.Runtime.Delete(ctx, runtime.Ref{Name: obj.Name, UID: obj.UID})))
			}
			next := moved(sb, sandbox.StatusSleeping)
			next.Checkpoint = ""
			errs = append(errs, s.transition(ctx, sb, next))
			res.Lost++
			log.Warn("recover: container gone; the sandbox sleeps and wakes fresh on its next use")
		case sandbox.StatusPending:
			if alive && obj.Labels[warm.Label] != "" && s.caps.Relabel != nil {
				// Taken from the warm pool, cut before its relabel: it is
				// this row's, and must be before the pool purges what is
				// labelled warm.
				if err := s.caps.Relabel.Relabel(ctx, runtime.Ref{Name: obj.Name, UID: obj.UID}, labels(sb)); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			if alive && sb.Network != nil && s.caps.Network != nil {
				// The start may have been cut between the container and its
				// policy (a pod's NetworkPolicy comes after the pod runs):
				// the row's policy is put in place, or the start fails as
				// the lease would have.
				if err := s.caps.Network.SetNetwork(ctx, sb.Name, networkRules(sb)); err != nil {
					log.Warn("recover: the interrupted lease's network policy could not be applied", "err", err)
					alive = false
				}
			}
			if alive {
				next := moved(sb, sandbox.StatusRunning)
				next.UID = obj.UID
				errs = append(errs, s.transition(ctx, sb, next))
				res.Adopted++
				log.Info("recover: completed a lease interrupted by the restart")
				continue
			}
			if ok {
				errs = append(errs, ignoreGone(s.d.Runtime.Delete(ctx, runtime.Ref{Name: obj.Name, UID: obj.UID})))
			}
			next := moved(sb, sandbox.StatusError)
			next.UID, next.Error = "", "the start was interrupted by a server restart"
			errs = append(errs, s.transition(ctx, sb, next))
			res.Failed++
		}
	}
	return res, errors.Join(errs...)
}

func ignoreGone(err error) error {
	if errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrConflict) {
		return nil
	}
	return err
}
