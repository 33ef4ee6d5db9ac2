package egress

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// Deny by name means the name's addresses too. Under {"allow":["internet"],
// "deny":["x.example"]} the proxy refuses a connection that names
// x.example, but one that names nothing (TLS without SNI, plain TCP, HTTP
// with a bare address) is judged by the address rules, and "internet"
// admits x.example's address. So the egress side learns the denied names'
// addresses and refuses them to every connection but one that names a
// name the policy allows by name and the resolver answered with that
// address (a host shared by an allowed name and a denied one), for as
// long as the answer lives.
//
// Learning only from what the sandbox asks its own resolver would not
// close the hole: the resolver refuses a denied name without asking
// upstream, and the sandbox can learn the address elsewhere (DNS over
// HTTPS to any address "internet" admits, or written into its code). So:
//
//   - the exact names of the deny list are looked up upstream when the
//     policy is applied and again every refreshEvery while it lives,
//     whatever the sandbox asks (the first lookups finish before the
//     proxy judges a connection by address);
//   - a sandbox's query for a name a wildcard deny rule covers is
//     answered "no such name" as before, and asked upstream anyway
//     (under "internet" only, where every other name is forwarded
//     anyway, so no new channel out), its addresses learned;
//   - an answer whose CNAME chain runs through a denied name is an answer
//     for that name: it is refused to the sandbox and its addresses are
//     learned.
//
// Forwarded traffic (UDP: QUIC) never meets the proxy, which a policy with
// names sends every TCP connection through: the rules refuse the learned
// addresses to it (the d- set, its elements timing out with the answers).

const (
	// refreshEvery is how often the deny list's names are looked up again;
	// each answer lives at least minTTL, so one missed refresh leaves no
	// gap.
	refreshEvery = minTTL / 2
	// deniedTTLCeiling bounds how long a learned address stays denied.
	deniedTTLCeiling = time.Hour
	// maxDenied bounds the denied names a sandbox's entry keeps.
	maxDenied = 1024
	// maxDeniedLookups bounds a sandbox's lookups of denied names in
	// flight: past it a query is answered without one.
	maxDeniedLookups = 4
	// readyWait bounds how long a connection waits for the first lookups.
	readyWait = 6 * time.Second
)

// deny is what an entry knows of its policy's denied names' addresses.
type deny struct {
	names   map[string]answer // by denied name
	ready   chan struct{}     // closed once the deny list's names were looked up
	stop    chan struct{}     // closed when the entry is replaced or detached
	lookups chan struct{}     // a token per lookup in flight
}

func newDeny() deny {
	return deny{names: map[string]answer{}, ready: make(chan struct{}), stop: make(chan struct{}), lookups: make(chan struct{}, maxDeniedLookups)}
}

// learnsDenied says whether e's policy needs its denied names' addresses:
// it denies names and has address rules a connection without a name could
// pass by.
func learnsDenied(r *netpolicy.Rules) bool {
	return r != nil && len(r.DenyNames) > 0 && (r.Internet || len(r.AllowPrefix) > 0)
}

// startDenied starts e's lookups of its deny list, carrying over what old
// (the entry e replaces, or nil) learned of names e still denies.
func (m *Manager) startDenied(e, old *entry) {
	if old != nil {
		m.mu.Lock()
		for n, a := range old.deny.names {
			if e.rules != nil && e.rules.NameDenied(n) {
				e.deny.names[n] = a
			}
		}
		m.mu.Unlock()
	}
	if len(e.deny.names) > 0 {
		if err := m.syncDenied(e); err != nil {
			m.log.Warn("egress: the denied names' addresses in the rules", "key", e.key, "err", err)
		}
	}
	if !learnsDenied(e.rules) || m.dns == nil {
		close(e.deny.ready)
		return
	}
	var exact []string
	for _, n := range e.rules.DenyNames {
		if !n.Wildcard {
			exact = append(exact, n.Domain)
		}
	}
	go func() {
		first := true
		for {
			for _, n := range exact {
				m.lookupDenied(e, n)
			}
			if first {
				close(e.deny.ready)
				first = false
				// What opened before the first answers came is judged again.
				if err := m.cutRefused(e); err != nil {
					m.log.Warn("egress: cutting the flows to denied names' addresses", "key", e.key, "err", err)
				}
			}
			select {
			case <-e.deny.stop:
				return
			case <-time.After(refreshEvery):
			}
		}
	}()
}

// stopDenied ends e's lookups.
func stopDenied(e *entry) {
	select {
	case <-e.deny.stop:
	default:
		close(e.deny.stop)
	}
}

// lookupDenied asks upstream for name's addresses and records them as
// denied to e; the answer goes to no sandbox.
func (m *Manager) lookupDenied(e *entry, name string) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.RecursionDesired = true
	resp, err := m.exchange(q)
	if err != nil {
		m.log.Debug("egress: looking up a denied name", "name", name, "err", err)
		return
	}
	m.learnFrom(e, name, resp.Answer)
}

// learnFrom records every A record of rrs as an address of the denied
// name (the chain of rrs is the name's).
func (m *Manager) learnFrom(e *entry, name string, rrs []dns.RR) {
	var addrs []netip.Addr
	var ttl uint32
	for _, rr := range rrs {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				addrs = append(addrs, ip)
				if ttl == 0 || a.Hdr.Ttl < ttl {
					ttl = a.Hdr.Ttl
				}
			}
		}
	}
	if len(addrs) == 0 {
		return
	}
	life := min(max(time.Duration(ttl)*time.Second, minTTL), deniedTTLCeiling)
	exp := time.Now().Add(life)
	m.mu.Lock()
	if len(e.deny.names) >= maxDenied {
		now := time.Now()
		for n, a := range e.deny.names {
			if now.After(a.expires) {
				delete(e.deny.names, n)
			}
		}
	}
	if len(e.deny.names) < maxDenied || e.deny.names[name].addrs != nil {
		// A fresh answer replaces the old one: the name moved.
		e.deny.names[name] = answer{addrs: addrs[:min(len(addrs), 64)], expires: exp}
	}
	m.mu.Unlock()
	if err := m.syncDenied(e); err != nil {
		m.log.Warn("egress: the denied names' addresses in the rules", "key", e.key, "err", err)
	}
}

// syncDenied rewrites e's set of denied addresses in the rules (d-) from
// what it knows, in one batch, each element timing out with its answer.
func (m *Manager) syncDenied(e *entry) error {
	m.mu.Lock()
	if m.byKey[e.key] != e {
		m.mu.Unlock()
		return nil // replaced: the new entry's rules are its own
	}
	now := time.Now()
	life := map[netip.Addr]time.Duration{}
	for _, a := range e.deny.names {
		if left := a.expires.Sub(now); left > time.Second {
			for _, ip := range a.addrs {
				life[ip] = max(life[ip], left)
			}
		}
	}
	m.mu.Unlock()
	c, err := m.nft()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	set := m.rs.deniedSet(e.key)
	c.FlushSet(set)
	var elems []nftables.SetElement
	for ip, left := range life {
		a := ip.As4()
		elems = append(elems, nftables.SetElement{Key: a[:], Timeout: left.Truncate(time.Second)})
	}
	if len(elems) > 0 {
		if err := c.SetAddElements(set, elems); err != nil {
			return err
		}
	}
	return c.Flush()
}

// queriedDenied is the resolver telling that e asked for name, which its
// policy refuses: a name a deny rule covers is looked up upstream in the
// background (under "internet" only) and its addresses learned.
func (m *Manager) queriedDenied(e *entry, name string, qtype uint16) {
	r := e.rules
	if r == nil || !r.Internet || !r.NameDenied(name) || qtype != dns.TypeA {
		return
	}
	select {
	case e.deny.lookups <- struct{}{}:
	default:
		return // enough in flight: the sandbox asks faster than upstream answers
	}
	// The sandbox's own upstream bound (dns.go) counts these too. The
	// deny list's own lookups (startDenied) take no slot: a sandbox that
	// fills its slots must not starve them and let the answers lapse.
	if !m.dnsSlots.acquire(e.key) {
		<-e.deny.lookups
		return
	}
	go func() {
		defer func() { m.dnsSlots.release(e.key); <-e.deny.lookups }()
		m.lookupDenied(e, name)
	}()
}

// screenAnswer is the resolver showing the upstream's answer to e's query
// for qname: an answer whose CNAME chain from qname runs through a name
// e's policy denies is that name's, so the addresses of the chain are
// learned as denied and the answer becomes "no such name". Records off
// the chain are not the name's and teach nothing.
func (m *Manager) screenAnswer(e *entry, qname string, resp *dns.Msg) {
	r := e.rules
	if r == nil || len(r.DenyNames) == 0 {
		return
	}
	chain := []string{dns.Fqdn(qname)}
	denied := ""
	for range 9 {
		next := ""
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, chain[len(chain)-1]) {
				next = c.Target
				break
			}
		}
		if next == "" || slices.ContainsFunc(chain, func(n string) bool { return strings.EqualFold(n, next) }) {
			break
		}
		if d, err := netpolicy.CanonicalDomain(next); err == nil && r.NameDenied(d) && denied == "" {
			denied = d
		}
		chain = append(chain, next)
	}
	if denied == "" {
		return
	}
	if learnsDenied(r) {
		var rrs []dns.RR
		for _, rr := range resp.Answer {
			if slices.ContainsFunc(chain, func(n string) bool { return strings.EqualFold(n, rr.Header().Name) }) {
				rrs = append(rrs, rr)
			}
		}
		m.learnFrom(e, denied, rrs)
	}
	resp.Answer, resp.Ns, resp.Extra = nil, nil, nil
	resp.Rcode = dns.RcodeNameError
}

// deniedAddr reports whether ip is an address the resolver learned for a
// name e's policy denies, within that answer's life. With wait it waits (a
// bounded time) for the first lookups of the deny list; without, it
// answers from what is known (the lookups judge the open connections
// again when they are done).
func (m *Manager) deniedAddr(e *entry, ip netip.Addr, wait bool) bool {
	if !learnsDenied(e.rules) {
		return false
	}
	if wait {
		t := time.NewTimer(readyWait)
		select {
		case <-e.deny.ready:
		case <-t.C:
		}
		t.Stop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, a := range e.deny.names {
		if now.Before(a.expires) {
			for _, d := range a.addrs {
				if d == ip {
					return true
				}
			}
		}
	}
	return false
}
