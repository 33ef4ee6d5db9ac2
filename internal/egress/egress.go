// Package egress opens a gVisor sandbox's network exactly as far as its
// policy (internal/netpolicy) says. Each sandbox with a policy gets a
// network namespace of its own (runsc --network=sandbox takes its
// interface) joined by a veth pair to the uplink namespace — this host's
// own by default, another namespace with --egress-uplink, which is how the
// tests keep every packet on this machine. In the uplink namespace:
//
//   - nftables rules (github.com/google/nftables) per sandbox: answers only
//     inbound, the resolver and the proxy as the only host services, the
//     policy's addresses out (less the ranges no policy reaches), DNS to
//     any other resolver refused, a connection-count and a bandwidth
//     bound, and NAT out of the uplink's route;
//   - a DNS resolver (github.com/miekg/dns) that answers a sandbox only the
//     names its policy allows, drops answers in never-reachable ranges (DNS
//     rebinding), and remembers what it answered;
//   - for a policy with domain rules, a proxy that every TCP connection of
//     the sandbox goes through: it reads the name the connection is for
//     (TLS SNI, HTTP Host) and lets it through only to an address the
//     resolver answered for that allowed name, within its TTL.
//
// A sandbox's state is its key (from its container name), its link index
// and its policy, which the gvisor backend keeps in the container's bundle;
// a restarted server re-adopts each (rules replaced, never duplicated) and
// sweeps what no container claims (namespaces, links, chains).
package egress

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go4.org/netipx"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// Options are the operator's egress settings (flags of the gvisor backend).
type Options struct {
	// Uplink is the network namespace (a path such as /run/netns/NAME)
	// sandbox traffic leaves through; empty means this host's own.
	Uplink string
	// Subnet is the IPv4 range the sandbox links are cut from (a /30
	// each; the first is the resolver's and the proxy's).
	Subnet string
	// DNS is the upstream resolver (ip or ip:port, reached from the uplink
	// namespace); empty means the first nameserver of the uplink's
	// resolv.conf.
	DNS string
	// RateMbit bounds each sandbox's traffic per direction (0: unbounded).
	RateMbit int
	// MaxConns bounds each sandbox's concurrent connections (0: unbounded).
	MaxConns int
	// NoResolverBounds lifts the resolver's bounds (names and addresses
	// remembered, upstream queries in flight; dns.go): the behaviour
	// before them, kept only so a benchmark can measure their cost in one
	// run (BenchmarkResolverLookup). No flag sets it.
	NoResolverBounds bool
	// NoFlowCut leaves open flows alone at a policy change and at the
	// end (no conntrack deletion, no proxied connection closed): the
	// behaviour before the cut, kept only so a benchmark can measure the
	// cut's cost in one run (BenchmarkEgressFlowCut). No flag sets it.
	NoFlowCut bool
}

// Defaults of Options.
const (
	DefaultSubnet   = "10.254.0.0/16"
	DefaultRateMbit = 200
	DefaultMaxConns = 512
)

// RegisterFlags defines the egress flags on fs, writing into o.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Uplink, "egress-uplink", "", "gvisor: the network namespace (path, e.g. /run/netns/egress) sandboxes with a network policy reach the world through; default: this host's own")
	fs.StringVar(&o.Subnet, "egress-subnet", DefaultSubnet, "gvisor: IPv4 range the sandboxes' links are cut from (a /30 each); must not overlap a network this host reaches")
	fs.StringVar(&o.DNS, "egress-dns", "", "gvisor: the upstream resolver (ip[:port]) the sandboxes' resolver asks; default: the uplink's /etc/resolv.conf")
	fs.IntVar(&o.RateMbit, "egress-rate-mbit", DefaultRateMbit, "gvisor: each sandbox's bandwidth per direction in Mbit/s (0: unbounded)")
	fs.IntVar(&o.MaxConns, "egress-max-conns", DefaultMaxConns, "gvisor: each sandbox's concurrent connections (0: unbounded)")
}

// Validate checks the options.
func (o Options) Validate() error {
	p, err := netip.ParsePrefix(o.subnet())
	if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
		return fmt.Errorf("--egress-subnet %q: an IPv4 CIDR of at least 16 addresses (/28)", o.Subnet)
	}
	if o.DNS != "" {
		if _, err := upstream(o.DNS); err != nil {
			return err
		}
	}
	if o.RateMbit < 0 || o.MaxConns < 0 {
		return errors.New("--egress-rate-mbit and --egress-max-conns must not be negative")
	}
	return nil
}

func (o Options) subnet() string {
	if o.Subnet == "" {
		return DefaultSubnet
	}
	return o.Subnet
}

func upstream(s string) (string, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.String(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	return "", fmt.Errorf("--egress-dns %q: an IP address, optionally with :port", s)
}

// ProxyPort is the proxy's port on the service address.
const ProxyPort = 15001

// Manager owns the uplink side of every sandbox's network.
type Manager struct {
	opts   Options
	log    *slog.Logger
	dir    string // bind mounts of the sandboxes' namespaces
	uplink netns.NsHandle
	ours   bool // uplink is this process's own namespace
	rs     *ruleset
	pool   netip.Prefix
	up     string // upstream resolver

	mu    sync.Mutex
	byKey map[string]*entry
	byIP  map[netip.Addr]*entry

	dns      *resolver
	dnsSlots slots // upstream queries in flight (dns.go)
	proxy    *proxy

	// routes answers the proxy's route lookups, one per connection: one
	// netlink socket for all of them, not one each.
	routeMu sync.Mutex
	routes  *netlink.Handle

	// flows are the proxy's relayed connections, by sandbox key (under
	// mu; flows.go).
	flows map[string]map[*flow]struct{}
	// ct deletes conntrack entries in the uplink (flows.go).
	ctMu sync.Mutex
	ct   *netlink.Handle
	// cleanSlots are the sandbox addresses this server ended with every
	// flow cut and no link left: no conntrack entry of theirs is left
	// (under mu).
	cleanSlots map[netip.Addr]bool
}

// entry is one sandbox as the resolver and proxy see it.
type entry struct {
	link
	index   int
	answers map[string]answer // by name
	deny    deny              // the denied names' addresses (denied.go)
}

type answer struct {
	addrs   []netip.Addr
	expires time.Time
}

// New prepares the uplink: forwarding on, the service address on a dummy
// link, the table and base chains, the resolver and the proxy. dir keeps
// the sandboxes' namespace mounts; open are the private ranges the
// operator opened.
func New(opts Options, dir string, open []netip.Prefix, log *slog.Logger) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	pool := netip.MustParsePrefix(opts.subnet()).Masked()
	m := &Manager{opts: opts, log: log, dir: dir, pool: pool, byKey: map[string]*entry{}, byIP: map[netip.Addr]*entry{}, cleanSlots: map[netip.Addr]bool{}}
	m.dnsSlots.off = opts.NoResolverBounds
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	self, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("egress: own namespace: %w", err)
	}
	if opts.Uplink == "" {
		m.uplink, m.ours = self, true
	} else {
		defer self.Close()
		if m.uplink, err = netns.GetFromPath(opts.Uplink); err != nil {
			return nil, fmt.Errorf("egress: --egress-uplink %s: %w", opts.Uplink, err)
		}
		m.ours = m.uplink.Equal(self)
	}
	svc := pool.Addr().Next()
	m.rs = &ruleset{
		table: &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet},
		svc:   svc, proxy: ProxyPort, pool: pool,
		never: netpolicy.Never(open, pool),
		lim:   limits{bytesPerSec: uint64(opts.RateMbit) * 1e6 / 8, conns: uint32(opts.MaxConns)},
	}
	if m.up, err = m.upstream(); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.prepareUplink(); err != nil {
		m.Close()
		return nil, err
	}
	if m.routes, err = netlink.NewHandleAt(m.uplink); err != nil {
		m.Close()
		return nil, fmt.Errorf("egress: netlink: %w", err)
	}
	if m.ct, err = netlink.NewHandleAt(m.uplink, unix.NETLINK_NETFILTER); err != nil {
		m.Close()
		return nil, fmt.Errorf("egress: netlink: %w", err)
	}
	if m.dns, err = m.startResolver(); err != nil {
		m.Close()
		return nil, err
	}
	if m.proxy, err = m.startProxy(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close stops the resolver and the proxy; sandboxes' rules and links stay
// (a restarted server adopts them).
func (m *Manager) Close() error {
	if m.dns != nil {
		m.dns.close()
	}
	if m.proxy != nil {
		m.proxy.close()
	}
	if m.routes != nil {
		m.routes.Close()
	}
	if m.ct != nil {
		m.ct.Close()
	}
	m.mu.Lock()
	for _, e := range m.byKey {
		stopDenied(e)
	}
	m.mu.Unlock()
	return m.uplink.Close()
}

// upstream is the resolver the sandboxes' resolver asks.
func (m *Manager) upstream() (string, error) {
	if m.opts.DNS != "" {
		return upstream(m.opts.DNS)
	}
	// ip netns exec's convention: /etc/netns/NAME/resolv.conf for a named
	// namespace, else the host's.
	paths := []string{"/etc/resolv.conf"}
	if m.opts.Uplink != "" {
		paths = append([]string{filepath.Join("/etc/netns", filepath.Base(m.opts.Uplink), "resolv.conf")}, paths...)
	}
	for _, p := range paths {
		conf, err := dns.ClientConfigFromFile(p)
		if err != nil {
			continue
		}
		for _, srv := range conf.Servers {
			if a, err := netip.ParseAddr(srv); err == nil && a.Is4() {
				return netip.AddrPortFrom(a, 53).String(), nil
			}
		}
	}
	return "", errors.New("egress: no IPv4 nameserver in the uplink's resolv.conf: pass --egress-dns")
}

// inUplink runs fn with this goroutine's thread in the uplink namespace:
// sockets fn makes live there.
func (m *Manager) inUplink(fn func() error) error {
	if m.ours {
		return fn()
	}
	return inNS(m.uplink, fn)
}

// onThread runs fn on this goroutine's OS thread, locked, and puts the
// thread back in its own network namespace afterwards, whatever fn moved
// it to. A thread that cannot be put back stays locked, so the Go runtime
// retires it instead of reusing it in the wrong namespace.
func onThread(fn func() error) error {
	goruntime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		goruntime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("egress: back to own namespace: %w", err))
	}
	goruntime.UnlockOSThread()
	return ferr
}

// inNS runs fn on a thread moved into ns: sockets fn makes live there.
func inNS(ns netns.NsHandle, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return fn()
	})
}

// InNetNS runs fn on a thread in the network namespace at path (a bind
// mount such as /run/netns/NAME): sockets fn makes live there.
func InNetNS(path string, fn func() error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	return inNS(ns, fn)
}

func (m *Manager) nft() (*nftables.Conn, error) {
	return nftables.New(nftables.WithNetNSFd(int(m.uplink)))
}

// prepareUplink turns forwarding on, puts the service address on the
// loopback, and adds the table and base chains.
func (m *Manager) prepareUplink() error {
	h, err := netlink.NewHandleAt(m.uplink)
	if err != nil {
		return fmt.Errorf("egress: netlink: %w", err)
	}
	defer h.Close()
	// The service address lives on the uplink's loopback (no dummy link:
	// not every kernel has the module), so it is local and nothing routes
	// to it but the sandboxes' links.
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("egress: loopback: %w", err)
	}
	addr := &netlink.Addr{IPNet: netipx.PrefixIPNet(netip.PrefixFrom(m.rs.svc, 32))}
	if err := h.AddrReplace(lo, addr); err != nil {
		return fmt.Errorf("egress: service address: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("egress: loopback up: %w", err)
	}
	if err := m.inUplink(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		return fmt.Errorf("egress: forwarding: %w", err)
	}
	c, err := m.nft()
	if err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	defer c.CloseLasting()
	if err := m.rs.base(c); err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: nftables base chains: %w", err)
	}
	return nil
}

// Link is what a sandbox's container needs of its network: the namespace
// to join, and the resolver to name in its resolv.conf.
type Link struct {
	NetNS    string
	Resolver netip.Addr
	Index    int // the link's slot, kept by the caller for Adopt
}

// KeyOf derives a sandbox's egress key from its container name (10 hex
// digits: the interface names must fit 15 bytes).
func KeyOf(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%010x", h.Sum64()&0xffffffffff)
}

// Attach makes key's namespace and link and programs its rules. It leaves
// nothing behind on failure.
func (m *Manager) Attach(key string, rules *netpolicy.Rules) (Link, error) {
	m.mu.Lock()
	if m.byKey[key] != nil {
		m.mu.Unlock()
		return Link{}, fmt.Errorf("egress: %s is attached", key)
	}
	index := m.freeIndex()
	if index < 0 {
		m.mu.Unlock()
		return Link{}, errors.New("egress: --egress-subnet has no free link left")
	}
	e := m.newEntry(key, index, rules)
	m.byKey[key], m.byIP[e.ip] = e, e // reserved while it is made
	m.mu.Unlock()
	// The slot's address may have had an earlier holder: its flows, if
	// any are left (a server stopped between an end's steps), must not
	// carry the world's answers into this sandbox. A slot this server
	// ended cleanly has none (its link was gone before the cut), so the
	// lease skips the table's dump then.
	m.mu.Lock()
	clean := m.cleanSlots[e.ip]
	delete(m.cleanSlots, e.ip)
	m.mu.Unlock()
	if !clean {
		if _, err := m.cutForwarded(e.ip, nil); err != nil {
			m.Detach(key)
			return Link{}, err
		}
	}
	l, err := m.attach(e)
	if err != nil {
		m.Detach(key)
		return Link{}, err
	}
	m.startDenied(e, nil)
	return l, nil
}

// Adopt takes over a sandbox attached by an earlier server: its rules are
// replaced by rules's, its link kept.
func (m *Manager) Adopt(key string, index int, rules *netpolicy.Rules) error {
	m.mu.Lock()
	if index < 1 || index >= m.slots() {
		m.mu.Unlock()
		return fmt.Errorf("egress: %s: link %d is outside --egress-subnet", key, index)
	}
	e := m.newEntry(key, index, rules)
	if old := m.byIP[e.ip]; old != nil && old.key != key {
		m.mu.Unlock()
		return fmt.Errorf("egress: %s: link %d is %s's", key, index, old.key)
	}
	m.byKey[key], m.byIP[e.ip] = e, e
	m.mu.Unlock()
	if _, err := os.Stat(m.nsPath(key)); err != nil {
		return fmt.Errorf("egress: %s: namespace gone: %w", key, err)
	}
	if err := m.program(e); err != nil {
		return err
	}
	m.startDenied(e, nil)
	// The recorded policy may be narrower than what an earlier server
	// had let through (a change it did not finish).
	return m.cutRefused(e)
}

// Update replaces key's policy: new connections follow it, and the open
// ones it refuses are cut (flows.go); the resolver's answers under the old
// policy are forgotten.
func (m *Manager) Update(key string, rules *netpolicy.Rules) error {
	m.mu.Lock()
	e := m.byKey[key]
	if e == nil {
		m.mu.Unlock()
		return fmt.Errorf("egress: %s is not attached", key)
	}
	next := m.newEntry(key, e.index, rules)
	m.byKey[key], m.byIP[next.ip] = next, next
	m.mu.Unlock()
	stopDenied(e)
	if err := m.program(next); err != nil {
		return err
	}
	m.startDenied(next, e) // after the rules: they empty the d- set
	// After the rules: a flow cut now cannot come back as a new one the
	// old rules would admit.
	return m.cutRefused(next)
}

// Detach removes key's rules, link and namespace. Missing parts are not
// an error.
func (m *Manager) Detach(key string) error {
	m.mu.Lock()
	var ip netip.Addr
	if e := m.byKey[key]; e != nil {
		delete(m.byIP, e.ip)
		delete(m.byKey, key)
		stopDenied(e)
		ip = e.ip
	}
	m.mu.Unlock()
	// Rules and link first: nothing new opens while the open flows are cut.
	err := errors.Join(m.unprogram(key), m.dropLink(key))
	if cerr := m.cutAll(key, ip); cerr != nil || err != nil {
		return errors.Join(err, cerr)
	}
	if ip.IsValid() && !m.opts.NoFlowCut {
		m.mu.Lock()
		if m.byIP[ip] == nil {
			m.cleanSlots[ip] = true
		}
		m.mu.Unlock()
	}
	return nil
}

// Sweep removes what no key in live claims: namespaces, links, chains.
func (m *Manager) Sweep(live map[string]bool) error {
	var errs []error
	keys := map[string]bool{}
	ents, _ := os.ReadDir(m.dir)
	for _, e := range ents {
		keys[e.Name()] = true
	}
	if h, err := netlink.NewHandleAt(m.uplink); err == nil {
		links, _ := h.LinkList()
		for _, l := range links {
			if k, ok := strings.CutPrefix(l.Attrs().Name, linkPrefix); ok && len(k) == 10 {
				keys[k] = true
			}
		}
		h.Close()
	}
	if chains, err := m.chains(); err == nil {
		for k := range chains {
			keys[k] = true
		}
	} else {
		errs = append(errs, err)
	}
	for k := range keys {
		if live[k] {
			continue
		}
		m.log.Info("removing a stray sandbox network", "key", k)
		errs = append(errs, m.Detach(k))
	}
	return errors.Join(errs...)
}

func (m *Manager) slots() int { return 1 << (32 - m.pool.Bits()) / 4 }

// freeIndex is the lowest free link slot (slot 0 is the service's), or -1.
func (m *Manager) freeIndex() int {
	used := map[int]bool{}
	for _, e := range m.byKey {
		used[e.index] = true
	}
	for i := 1; i < m.slots(); i++ {
		if !used[i] {
			return i
		}
	}
	return -1
}

func (m *Manager) newEntry(key string, index int, rules *netpolicy.Rules) *entry {
	a := m.pool.Addr().As4()
	gw := netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(a[:])+uint32(index)*4+1)))
	return &entry{link: link{key: key, gw: gw, ip: gw.Next(), rules: rules}, index: index, answers: map[string]answer{}, deny: newDeny()}
}

func (m *Manager) nsPath(key string) string { return filepath.Join(m.dir, key) }

// attach makes the namespace (a bind mount under dir, found by the sweep),
// the veth pair (sbxKEY in the uplink, eth0 inside) and the addresses and
// route, then programs the rules.
func (m *Manager) attach(e *entry) (Link, error) {
	path := m.nsPath(e.key)
	ns, err := newNamedNS(path)
	if err != nil {
		return Link{}, err
	}
	defer ns.Close()
	up, err := netlink.NewHandleAt(m.uplink)
	if err != nil {
		return Link{}, fmt.Errorf("egress: netlink: %w", err)
	}
	defer up.Close()
	in, err := netlink.NewHandleAt(ns)
	if err != nil {
		return Link{}, fmt.Errorf("egress: netlink: %w", err)
	}
	defer in.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: e.ifname(), MTU: 1500}, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns)}
	if err := up.LinkAdd(veth); err != nil {
		return Link{}, fmt.Errorf("egress: veth: %w", err)
	}
	host, err := up.LinkByName(e.ifname())
	if err != nil {
		return Link{}, fmt.Errorf("egress: veth: %w", err)
	}
	if err := up.AddrAdd(host, &netlink.Addr{IPNet: netipx.PrefixIPNet(netip.PrefixFrom(e.gw, 30))}); err != nil {
		return Link{}, fmt.Errorf("egress: address: %w", err)
	}
	if err := up.LinkSetUp(host); err != nil {
		return Link{}, fmt.Errorf("egress: veth up: %w", err)
	}
	peer, err := in.LinkByName("eth0")
	if err != nil {
		return Link{}, fmt.Errorf("egress: veth peer: %w", err)
	}
	if err := in.AddrAdd(peer, &netlink.Addr{IPNet: netipx.PrefixIPNet(netip.PrefixFrom(e.ip, 30))}); err != nil {
		return Link{}, fmt.Errorf("egress: address: %w", err)
	}
	for _, l := range []netlink.Link{peer} {
		if err := in.LinkSetUp(l); err != nil {
			return Link{}, fmt.Errorf("egress: link up: %w", err)
		}
	}
	if lo, err := in.LinkByName("lo"); err == nil {
		in.LinkSetUp(lo)
	}
	if err := in.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.IP(e.gw.AsSlice())}); err != nil {
		return Link{}, fmt.Errorf("egress: route: %w", err)
	}
	if err := m.program(e); err != nil {
		return Link{}, err
	}
	return Link{NetNS: path, Resolver: m.rs.svc, Index: e.index}, nil
}

// newNamedNS makes a network namespace and keeps it at path (a bind mount,
// as `ip netns add` does), without moving this process.
func newNamedNS(path string) (netns.NsHandle, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return netns.None(), fmt.Errorf("egress: namespace file: %w", err)
	}
	f.Close()
	var ns netns.NsHandle
	err = onThread(func() error {
		var err error
		if ns, err = netns.New(); err != nil { // unshare: this thread only
			return err
		}
		return unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
	})
	if err != nil {
		if ns.IsOpen() {
			ns.Close()
		}
		os.Remove(path)
		return netns.None(), fmt.Errorf("egress: namespace: %w", err)
	}
	return ns, nil
}

// program replaces e's chains and map elements in one batch.
func (m *Manager) program(e *entry) error {
	c, err := m.nft()
	if err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	defer c.CloseLasting()
	if err := m.rs.add(c, &e.link); err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: nftables rules of %s: %w", e.key, err)
	}
	return nil
}

// chains lists the per-sandbox chains and sets of the table, by key.
func (m *Manager) chains() (map[string][2][]string, error) {
	c, err := m.nft()
	if err != nil {
		return nil, fmt.Errorf("egress: nftables: %w", err)
	}
	defer c.CloseLasting()
	out := map[string][2][]string{}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("egress: nftables: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name != tableName {
			continue
		}
		if k := keyOf(ch.Name); k != "" {
			v := out[k]
			v[0] = append(v[0], ch.Name)
			out[k] = v
		}
	}
	sets, err := c.GetSets(m.rs.table)
	if err != nil {
		return nil, fmt.Errorf("egress: nftables: %w", err)
	}
	for _, s := range sets {
		for _, p := range []string{"a-", "p-", "d-"} {
			if k, ok := strings.CutPrefix(s.Name, p); ok {
				v := out[k]
				v[1] = append(v[1], s.Name)
				out[k] = v
			}
		}
	}
	return out, nil
}

// unprogram removes key's chains, sets and map elements, if any.
func (m *Manager) unprogram(key string) error {
	all, err := m.chains()
	if err != nil {
		return err
	}
	got, ok := all[key]
	if !ok {
		return nil
	}
	c, err := m.nft()
	if err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	defer c.CloseLasting()
	if err := m.rs.remove(c, key, got[0], got[1]); err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	if err := c.Flush(); err != nil {
		// A map element may be missing (a crash between the batches of an
		// earlier attach): remove the chains without touching the maps.
		c2, err2 := m.nft()
		if err2 != nil {
			return err
		}
		defer c2.CloseLasting()
		for _, ch := range got[0] {
			c2.FlushChain(m.rs.chain(ch))
		}
		for _, ch := range got[0] {
			c2.DelChain(m.rs.chain(ch))
		}
		for _, s := range got[1] {
			c2.DelSet(&nftables.Set{Table: m.rs.table, Name: s})
		}
		if err2 := c2.Flush(); err2 != nil {
			return fmt.Errorf("egress: nftables: removing %s: %w", key, errors.Join(err, err2))
		}
	}
	return nil
}

// dropLink removes key's namespace mount (its veth goes with it once no
// process holds the namespace) and the host end, if still there.
func (m *Manager) dropLink(key string) error {
	errs := []error{DropNamespace(m.nsPath(key))}
	if h, err := netlink.NewHandleAt(m.uplink); err == nil {
		if l, err := h.LinkByName(linkPrefix + key); err == nil {
			if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("egress: link: %w", err))
			}
		}
		h.Close()
	}
	return errors.Join(errs...)
}

// lookup is the sandbox a packet from src belongs to.
func (m *Manager) lookup(src netip.Addr) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byIP[src.Unmap()]
}

// remember records what the resolver answered e for name, for at least ttl
// (cut to maxTTL). Bounded (dns.go): a name keeps its newest maxAddrs
// addresses, and a sandbox its maxNames names — expired ones are pruned
// when a new name finds the table full, then the one expiring first goes.
func (m *Manager) remember(e *entry, name string, addrs []netip.Addr, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.byKey[e.key]
	if cur != e {
		return // the policy changed meanwhile
	}
	now := time.Now()
	a, known := cur.answers[name]
	if !m.opts.NoResolverBounds {
		ttl = min(ttl, maxTTL)
		if !known && len(cur.answers) >= maxNames {
			cur.evict(now)
		}
	}
	exp := now.Add(ttl)
	merged := slices.Clone(addrs)
	for _, ip := range a.addrs {
		if !slices.Contains(merged, ip) {
			merged = append(merged, ip)
		}
	}
	if !m.opts.NoResolverBounds && len(merged) > maxAddrs {
		merged = merged[:maxAddrs] // the newest answer's first
	}
	a.addrs = merged
	if exp.After(a.expires) {
		a.expires = exp
	}
	cur.answers[name] = a
	// Unbounded, the table was pruned only past 4096 names.
	if m.opts.NoResolverBounds && len(cur.answers) > 4096 {
		for n, v := range cur.answers {
			if now.After(v.expires) {
				delete(cur.answers, n)
			}
		}
	}
}

// maxNames bounds the names a sandbox's answers are remembered for: at
// most maxNames × maxAddrs addresses (about 1 MiB) per sandbox.
const maxNames = 1024

// evict makes room for one name in e.answers (under Manager.mu): every
// expired answer goes, and if none had, the one expiring first.
func (e *entry) evict(now time.Time) {
	oldest, first := "", time.Time{}
	for n, v := range e.answers {
		if now.After(v.expires) {
			delete(e.answers, n)
			continue
		}
		if oldest == "" || v.expires.Before(first) {
			oldest, first = n, v.expires
		}
	}
	if len(e.answers) >= maxNames {
		delete(e.answers, oldest)
	}
}

// answered reports whether the resolver answered e ip for name, within
// the answer's TTL.
func (m *Manager) answered(e *entry, name string, ip netip.Addr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.byKey[e.key]
	if cur == nil {
		return false
	}
	a, ok := cur.answers[name]
	return ok && time.Now().Before(a.expires) && slices.Contains(a.addrs, ip.Unmap())
}

// current is e's entry now (the policy may have changed since a lookup).
func (m *Manager) current(e *entry) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byKey[e.key]
}
