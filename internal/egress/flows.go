package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// A policy change, and the end of a sandbox's network, must reach what is
// already open, not only what opens next: the forwarding rules accept an
// established flow before they look at its address ("ct state established
// accept"), and the proxy decides once, when a connection opens. So every
// change cuts the flows the new policy refuses, on both paths:
//
//   - forwarded flows (address rules): their conntrack entries in the
//     uplink namespace, where the forwarding and the NAT happen, are
//     deleted; the next packet either way then meets the rules as a new
//     one (from the sandbox: refused; from the world: no NAT entry to
//     follow, so it never reaches the sandbox);
//   - proxied flows (a policy with names): the proxy keeps every relayed
//     connection with the name and destination it was let through for,
//     judges each again under the new policy, and closes (with a reset)
//     those it would now refuse.
//
// The end of a sandbox (stop, sleep, delete) cuts everything it had open.

// flow is one connection the proxy relays.
type flow struct {
	dst netip.AddrPort
	// name is the name of what goes through: the TLS SNI, or the Host of
	// the latest HTTP request ("" for none); byName says it was let
	// through because the name is allowed and the resolver answered it
	// with dst.
	name   string
	byName bool
	cut    func() // closes both ends at once
}

// track records f as key's until the returned func is called.
func (m *Manager) track(key string, f *flow) (untrack func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.flows == nil {
		m.flows = map[string]map[*flow]struct{}{}
	}
	set := m.flows[key]
	if set == nil {
		set = map[*flow]struct{}{}
		m.flows[key] = set
	}
	set[f] = struct{}{}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if set := m.flows[key]; set != nil {
			delete(set, f)
			if len(set) == 0 {
				delete(m.flows, key)
			}
		}
	}
}

// setFlowName records the name the latest request of f was let through
// for.
func (m *Manager) setFlowName(f *flow, name string, byName bool) {
	m.mu.Lock()
	f.name, f.byName = name, byName
	m.mu.Unlock()
}

// cutProxied closes key's relayed connections that its current policy
// refuses (all of them when key is no longer attached). It returns how
// many it closed.
func (m *Manager) cutProxied(key string) int {
	m.mu.Lock()
	cur := m.byKey[key]
	var all []*flow
	var names []string
	var byName []bool
	for f := range m.flows[key] {
		all = append(all, f)
		names = append(names, f.name)
		byName = append(byName, f.byName)
	}
	m.mu.Unlock()
	n := 0
	for i, f := range all {
		// The route lookup and the deny set are read outside m.mu.
		if cur != nil {
			if ok, _ := m.judge(cur, names[i], f.dst, byName[i], false); ok {
				continue
			}
		}
		m.log.Debug("egress: open connection cut by a policy change", "key", key, "name", names[i], "dst", f.dst)
		f.cut()
		n++
	}
	return n
}

// cutForwarded deletes the conntrack entries in the uplink namespace of
// the forwarded flows from ip that keep does not keep (nil keeps none).
// Flows to the service address (the resolver, and the proxy's connections,
// DNAT'd there) are the proxy's to judge and stay unless keep is nil.
func (m *Manager) cutForwarded(ip netip.Addr, keep func(proto uint8, dst netip.AddrPort) bool) (uint, error) {
	if m.opts.NoFlowCut {
		return 0, nil
	}
	f := &flowFilter{src: ip, svc: m.rs.svc, keep: keep}
	m.ctMu.Lock()
	defer m.ctMu.Unlock()
	n, err := m.ct.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return n, fmt.Errorf("egress: conntrack: %w", err)
	}
	if err != nil {
		// The table changed under the dump: once more, for what it missed.
		n2, err := m.ct.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return n + n2, fmt.Errorf("egress: conntrack: %w", err)
		}
		n += n2
	}
	return n, nil
}

// flowFilter matches the conntrack entries of flows a sandbox (src)
// opened that are not to be kept.
type flowFilter struct {
	src, svc netip.Addr
	keep     func(proto uint8, dst netip.AddrPort) bool
}

func (f *flowFilter) MatchConntrackFlow(fl *netlink.ConntrackFlow) bool {
	src, ok := addrOf(fl.Forward.SrcIP)
	if !ok || src != f.src {
		return false
	}
	if f.keep == nil {
		return true
	}
	dst, ok := addrOf(fl.Forward.DstIP)
	if !ok {
		return true
	}
	// A connection DNAT'd to the proxy, or to the resolver: the proxy
	// judges its own, the resolver's are lookups.
	if reply, ok := addrOf(fl.Reverse.SrcIP); ok && reply == f.svc || dst == f.svc {
		return false
	}
	return !f.keep(fl.Forward.Protocol, netip.AddrPortFrom(dst, fl.Forward.DstPort))
}

func addrOf(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

// forwards reports whether the rules rs programs for r let a new flow of
// proto to dst through the forward chain (f-): the same test, so that what
// a change keeps is exactly what it would admit again.
func (rs *ruleset) forwards(r *netpolicy.Rules, allowed func(netip.Addr) bool, proto uint8, dst netip.AddrPort) bool {
	if r == nil || r.None() || !allowed(dst.Addr()) {
		return false
	}
	tcpUDP := proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_UDP
	if tcpUDP && (dst.Port() == 53 || dst.Port() == 853) {
		return false // DNS goes to the sandbox's resolver only
	}
	if proto == unix.IPPROTO_TCP && r.HasNames() {
		return false // a policy with names sends TCP through the proxy (n-)
	}
	if len(r.Ports) > 0 {
		return tcpUDP && r.PortAllowed(dst.Port())
	}
	return true
}

// cutRefused cuts what e's policy no longer allows, on both paths.
func (m *Manager) cutRefused(e *entry) error {
	allowed := m.rs.allowedSet(e.rules)
	_, err := m.cutForwarded(e.ip, func(proto uint8, dst netip.AddrPort) bool {
		return m.rs.forwards(e.rules, allowed.Contains, proto, dst) && !m.deniedAddr(e, dst.Addr(), false)
	})
	if !m.opts.NoFlowCut {
		m.cutProxied(e.key)
	}
	return err
}

// cutAll cuts every flow of key (at ip, if known): its network ends.
func (m *Manager) cutAll(key string, ip netip.Addr) error {
	if m.opts.NoFlowCut {
		return nil
	}
	m.cutProxied(key) // key is detached: every one of them
	if !ip.IsValid() {
		return nil
	}
	_, err := m.cutForwarded(ip, nil)
	return err
}
