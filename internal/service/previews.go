package service

import (
	"slices"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// maxPublicPorts bounds a lease's public ports.
const maxPublicPorts = 16

// publicPorts checks a lease's public ports: allowed by the operator,
// each a port, at most maxPublicPorts; answered sorted without repeats.
func (s *Service) publicPorts(ports []int) ([]int, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	if !s.cfg.PublicPreviews {
		return nil, sandbox.Errorf(sandbox.KindForbidden, "this server does not allow public previews (publicPorts): open a port with your key or a preview link (POST /v1/sandbox/{id}/ports/{port}/link), or ask the operator for --public-previews")
	}
	if len(ports) > maxPublicPorts {
		return nil, sandbox.Errorf(sandbox.KindInvalid, "publicPorts: at most %d ports", maxPublicPorts)
	}
	out := slices.Clone(ports)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, p := range out {
		if p < 1 || p > 65535 {
			return nil, sandbox.Errorf(sandbox.KindInvalid, "publicPorts: %d is not a port (1-65535)", p)
		}
	}
	return out, nil
}
