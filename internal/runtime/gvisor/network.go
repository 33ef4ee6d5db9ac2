package gvisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// egress is the egress side, made on first need: a server whose operator
// allows no network changes nothing on the host.
func (r *Runtime) egress() (*egress.Manager, error) {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if r.net != nil {
		return r.net, nil
	}
	log := r.cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := egress.New(r.cfg.Egress, filepath.Join(r.cfg.StateDir, "netns"), r.cfg.NetworkOpen, log)
	if err != nil {
		return nil, err
	}
	r.net = m
	return m, nil
}

// attach gives a sandbox with a network its namespace, link and rules,
// and the resolv.conf that names its resolver; the meta (already on disk,
// so a crash from here is swept) records the link.
func (r *Runtime) attach(bundle string, m *meta, rules *netpolicy.Rules) error {
	if m.Loop {
		return egress.NewLoopback(r.loopPath(m.Name))
	}
	if m.Net == nil {
		return nil
	}
	mgr, err := r.egress()
	if err != nil {
		return err
	}
	if rules == nil {
		rules = &netpolicy.Rules{}
	}
	l, err := mgr.Attach(m.Net.Key, rules)
	if err != nil {
		return err
	}
	m.Net.Index = l.Index
	if err := writeJSON(filepath.Join(bundle, "meta.json"), m); err != nil {
		return err
	}
	conf := fmt.Sprintf("# written by sandbox: the sandbox's resolver answers the names its network policy allows\nnameserver %s\noptions ndots:0\n", l.Resolver)
	if err := os.WriteFile(filepath.Join(bundle, "resolv.conf"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	return nil
}

// detach removes a sandbox's network or loopback namespace, if it has one.
func (r *Runtime) detach(m *meta) error {
	if m.Loop {
		return egress.DropNamespace(r.loopPath(m.Name))
	}
	if m.Net == nil {
		return nil
	}
	mgr, err := r.egress()
	if err != nil {
		return err
	}
	return mgr.Detach(m.Net.Key)
}

// loopPath is where the loopback namespace of sandbox name is kept.
func (r *Runtime) loopPath(name string) string { return filepath.Join(r.loops, name) }

// netNamespace is the OCI namespace entry: the egress side's namespace for
// a sandbox with a network, its loopback namespace for one with none, else
// (an earlier server's sandbox) a new empty one, which runsc
// --network=none uses none of.
func (r *Runtime) netNamespace(m *meta) map[string]string {
	if m.Loop {
		return map[string]string{"type": "network", "path": r.loopPath(m.Name)}
	}
	if m.Net == nil {
		return map[string]string{"type": "network"}
	}
	return map[string]string{"type": "network", "path": filepath.Join(r.cfg.StateDir, "netns", m.Net.Key)}
}

// resolvMount binds the bundle's resolv.conf over the image's.
func (r *Runtime) resolvMount(m *meta) []map[string]any {
	if m.Net == nil {
		return nil
	}
	return []map[string]any{{"destination": "/etc/resolv.conf", "type": "bind", "source": filepath.Join(r.bundles, m.Name, "resolv.conf"),
		"options": []string{"bind", "ro", "nosuid", "nodev", "noexec"}}}
}

// adoptNetworks re-programs the network of every sandbox a bundle
// records (an earlier server's), and sweeps the namespaces, links and
// rules no bundle claims.
func (r *Runtime) adoptNetworks() error {
	ents, err := os.ReadDir(r.bundles)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	var withNet []*meta
	loops := map[string]bool{}
	for _, e := range ents {
		m, err := r.loadMeta(e.Name())
		if err == nil && m.Net != nil {
			withNet = append(withNet, m)
		}
		if err == nil && m.Loop {
			loops[m.Name] = true
		}
	}
	r.sweepLoops(loops)
	_, statErr := os.Stat(filepath.Join(r.cfg.StateDir, "netns"))
	if len(withNet) == 0 && !r.cfg.Network && statErr != nil {
		return nil // never had a network: leave the host alone
	}
	mgr, err := r.egress()
	if err != nil {
		return err
	}
	live := map[string]bool{}
	var errs []error
	for _, m := range withNet {
		if m.Net.Index == 0 {
			continue // never attached: the sweep takes any half of it
		}
		rules, err := netpolicy.Parse(m.Net.Policy)
		if err != nil {
			rules = &netpolicy.Rules{} // closed is the safe side
		}
		if err := mgr.Adopt(m.Net.Key, m.Net.Index, rules); err != nil {
			errs = append(errs, err)
			continue
		}
		live[m.Net.Key] = true
	}
	errs = append(errs, mgr.Sweep(live))
	// One sandbox's network that cannot be adopted must not keep the
	// server down: its container is swept (or fails its next use) like any
	// other broken one.
	if err := errors.Join(errs...); err != nil && r.cfg.Log != nil {
		r.cfg.Log.Warn("adopting the sandboxes' networks", "err", err)
	}
	return nil
}

// sweepLoops removes the loopback namespaces no bundle claims (a crash
// between a namespace's making and its bundle's removal).
func (r *Runtime) sweepLoops(live map[string]bool) {
	ents, _ := os.ReadDir(r.loops)
	for _, e := range ents {
		if live[e.Name()] {
			continue
		}
		if err := egress.DropNamespace(r.loopPath(e.Name())); err != nil && r.cfg.Log != nil {
			r.cfg.Log.Warn("removing a stray loopback namespace", "name", e.Name(), "err", err)
		}
	}
}

// Close stops the egress side's resolver and proxy (the sandboxes' rules
// and links stay for the next server to adopt).
func (r *Runtime) Close() error {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if r.net == nil {
		return nil
	}
	err := r.net.Close()
	r.net = nil
	return err
}
