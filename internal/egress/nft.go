package egress

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"go4.org/netipx"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// The ruleset lives in one table of the uplink namespace. Base chains
// dispatch a packet by the sandbox link it came in on (or goes out on)
// through verdict maps to that sandbox's own chains, so a sandbox's rules
// are added, replaced and removed as a unit (its chains and its map
// elements, in one atomic batch) and no rule ever names two sandboxes.
// Unknown sandbox links ("sbx*" with no map element) are dropped.
const (
	tableName  = "sandbox"
	linkPrefix = "sbx" // host end of a sandbox's veth: sbx + key
)

// Verdict maps of the base chains, keyed by interface name.
const (
	mapFwdIn  = "fwd_in"  // forward, from a sandbox → f-KEY
	mapFwdOut = "fwd_out" // forward, to a sandbox → g-KEY
	mapIn     = "in"      // input, from a sandbox → i-KEY
	mapOut    = "out"     // output, to a sandbox → o-KEY
	mapNAT    = "nat"     // prerouting nat, from a sandbox → n-KEY
)

// chainKinds are the per-sandbox chains, by prefix.
var chainKinds = []string{"f-", "g-", "i-", "o-", "n-", "u-", "w-"}

// dnsRate bounds a sandbox's UDP queries to its resolver, a second (a
// burst of twice as many): a busy build asks a few dozen.
const dnsRate = 200

// limits are the per-sandbox bounds the rules enforce.
type limits struct {
	bytesPerSec uint64 // each direction; 0 unbounded
	conns       uint32 // concurrent connections; 0 unbounded
}

// link is one sandbox's addressing and policy, what its chains are made of.
type link struct {
	key   string
	ip    netip.Addr // the sandbox's end
	gw    netip.Addr // the host's end
	rules *netpolicy.Rules
}

func (l *link) ifname() string { return linkPrefix + l.key }

type ruleset struct {
	table *nftables.Table
	svc   netip.Addr // the resolver's and proxy's address
	proxy uint16     // the proxy's port
	pool  netip.Prefix
	never *netipx.IPSet
	lim   limits
}

func (rs *ruleset) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: rs.table}
}

func (rs *ruleset) vmap(name string) *nftables.Set {
	return &nftables.Set{Table: rs.table, Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// base adds the table, the verdict maps and the base chains, replacing the
// base chains' rules (idempotent: a restart re-adds them, never twice).
func (rs *ruleset) base(c *nftables.Conn) error {
	c.AddTable(rs.table)
	for _, m := range []string{mapFwdIn, mapFwdOut, mapIn, mapOut, mapNAT} {
		if err := c.AddSet(rs.vmap(m), nil); err != nil {
			return err
		}
	}
	accept := nftables.ChainPolicyAccept
	type baseChain struct {
		name string
		hook *nftables.ChainHook
		prio *nftables.ChainPriority
		typ  nftables.ChainType
		body [][]expr.Any
	}
	prefix := ifnameMatch(unix.NFT_META_IIFNAME, linkPrefix, false)
	oprefix := ifnameMatch(unix.NFT_META_OIFNAME, linkPrefix, false)
	drop := verdict(expr.VerdictDrop)
	chains := []baseChain{
		{"forward", nftables.ChainHookForward, nftables.ChainPriorityFilter, nftables.ChainTypeFilter, [][]expr.Any{
			dispatch(expr.MetaKeyIIFNAME, rs.vmap(mapFwdIn)),
			dispatch(expr.MetaKeyOIFNAME, rs.vmap(mapFwdOut)),
			cat(prefix, drop),
			cat(oprefix, drop),
		}},
		{"input", nftables.ChainHookInput, nftables.ChainPriorityFilter, nftables.ChainTypeFilter, [][]expr.Any{
			dispatch(expr.MetaKeyIIFNAME, rs.vmap(mapIn)),
			cat(prefix, drop),
		}},
		{"output", nftables.ChainHookOutput, nftables.ChainPriorityFilter, nftables.ChainTypeFilter, [][]expr.Any{
			dispatch(expr.MetaKeyOIFNAME, rs.vmap(mapOut)),
		}},
		{"prerouting", nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest, nftables.ChainTypeNAT, [][]expr.Any{
			dispatch(expr.MetaKeyIIFNAME, rs.vmap(mapNAT)),
		}},
		// What leaves for the uplink's route leaves as the uplink.
		{"postrouting", nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource, nftables.ChainTypeNAT, [][]expr.Any{
			cat(ipv4(), saddrIn(rs.pool), ifnameMatch(unix.NFT_META_OIFNAME, linkPrefix, true), []expr.Any{&expr.Masq{}}),
		}},
	}
	for _, b := range chains {
		ch := c.AddChain(&nftables.Chain{Name: b.name, Table: rs.table, Hooknum: b.hook, Priority: b.prio, Type: b.typ, Policy: &accept})
		c.FlushChain(ch)
		for _, e := range b.body {
			c.AddRule(&nftables.Rule{Table: rs.table, Chain: ch, Exprs: e})
		}
	}
	return nil
}

// add programs one sandbox: its chains (created if missing, emptied, then
// filled, so a re-adoption replaces rather than duplicates) and its map
// elements. Everything goes in the caller's batch.
func (rs *ruleset) add(c *nftables.Conn, l *link) error {
	r := l.rules
	if r == nil {
		r = &netpolicy.Rules{}
	}
	chains := map[string]*nftables.Chain{}
	for _, k := range chainKinds {
		ch := c.AddChain(rs.chain(k + l.key))
		c.FlushChain(ch)
		chains[k] = ch
	}
	// a-: the addresses the policy's address rules reach; p-: its ports.
	aset := &nftables.Set{Table: rs.table, Name: "a-" + l.key, Interval: true, KeyType: nftables.TypeIPAddr}
	pset := &nftables.Set{Table: rs.table, Name: "p-" + l.key, KeyType: nftables.TypeInetService}
	for _, set := range []*nftables.Set{aset, pset} {
		if err := c.AddSet(set, nil); err != nil {
			return err
		}
		c.FlushSet(set)
	}
	if elems := intervalElements(rs.allowedSet(r)); len(elems) > 0 {
		if err := c.SetAddElements(aset, elems); err != nil {
			return err
		}
	}
	if len(r.Ports) > 0 {
		var elems []nftables.SetElement
		for _, port := range r.Ports {
			elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(port)})
		}
		if err := c.SetAddElements(pset, elems); err != nil {
			return err
		}
	}
	// d-: the addresses learned for the names the policy denies
	// (denied.go), each for its answer's life; rewritten whole at each
	// learning (syncDenied), emptied here.
	dset := rs.deniedSet(l.key)
	if err := c.AddSet(dset, nil); err != nil {
		return err
	}
	c.FlushSet(dset)
	rule := func(kind string, exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: rs.table, Chain: chains[kind], Exprs: cat(exprs...)})
	}
	open := !r.None()
	reject := rejectAny()
	estab := cat(ctEstablished(), verdict(expr.VerdictAccept))
	// A sandbox sends IPv4 from its own address or nothing: a spoofed
	// source would borrow another sandbox's policy at the resolver and
	// the proxy.
	notV4 := cat(nfprotoNot(unix.NFPROTO_IPV4), verdict(expr.VerdictDrop))
	notMine := cat(saddrNot(l.ip), verdict(expr.VerdictDrop))

	// Bandwidth, each direction, shared by forwarded and proxied traffic.
	if rs.lim.bytesPerSec > 0 {
		burst := rs.lim.bytesPerSec / 4
		if burst > 1<<30 {
			burst = 1 << 30
		}
		rule("u-", []expr.Any{&expr.Limit{Type: expr.LimitTypePktBytes, Rate: rs.lim.bytesPerSec, Unit: expr.LimitTimeSecond, Burst: uint32(burst), Over: true}}, verdict(expr.VerdictDrop))
		rule("w-", []expr.Any{&expr.Limit{Type: expr.LimitTypePktBytes, Rate: rs.lim.bytesPerSec, Unit: expr.LimitTimeSecond, Burst: uint32(burst), Over: true}}, verdict(expr.VerdictDrop))
	}
	connLimit := func(kind string) {
		if rs.lim.conns > 0 {
			rule(kind, []expr.Any{&expr.Connlimit{Count: rs.lim.conns, Flags: expr.NFT_CONNLIMIT_F_INV}}, reject)
		}
	}

	// f-: forwarded from the sandbox, straight to an address its policy
	// allows (a policy with names sends TCP to the proxy instead, n-).
	rule("f-", notV4)
	rule("f-", notMine)
	rule("f-", jump("u-"+l.key))
	rule("f-", estab)
	connLimit("f-")
	if open {
		// DNS and DNS over TLS go to the sandbox's resolver only: any other
		// resolver would answer names the policy does not allow.
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			for _, port := range []uint16{53, 853} {
				rule("f-", l4proto(proto), dport(port), reject)
			}
		}
		// A denied name's addresses: UDP (QUIC) never meets the proxy.
		rule("f-", daddrInSet(dset), reject)
		if len(r.Ports) == 0 {
			rule("f-", daddrInSet(aset), verdict(expr.VerdictAccept))
		} else {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				rule("f-", l4proto(proto), dportInSet(pset), daddrInSet(aset), verdict(expr.VerdictAccept))
			}
		}
	}
	rule("f-", reject)

	// g-: forwarded to the sandbox: answers only, never a new connection
	// (so neither another sandbox nor the uplink's side opens one).
	rule("g-", jump("w-"+l.key))
	rule("g-", estab)
	rule("g-", verdict(expr.VerdictDrop))

	// i-: to this host from the sandbox: its resolver and (for a policy
	// with names) the proxy, nothing else of the host.
	rule("i-", notV4)
	rule("i-", notMine)
	rule("i-", jump("u-"+l.key))
	// DNS over UDP to the resolver at most dnsRate queries a second:
	// past it dropped here, before the established rule (a flood from one
	// socket is one established flow), so one sandbox's flood never fills
	// the resolver's socket, which every sandbox shares, ahead of its
	// neighbours' queries, and costs the server nothing.
	rule("i-", daddrIs(rs.svc), l4proto(unix.IPPROTO_UDP), dport(53),
		[]expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: dnsRate, Unit: expr.LimitTimeSecond, Burst: 2 * dnsRate, Over: true}}, verdict(expr.VerdictDrop))
	rule("i-", estab)
	connLimit("i-")
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule("i-", daddrIs(rs.svc), l4proto(proto), dport(53), verdict(expr.VerdictAccept))
	}
	if open && r.HasNames() {
		rule("i-", daddrIs(rs.svc), l4proto(unix.IPPROTO_TCP), dport(rs.proxy), verdict(expr.VerdictAccept))
	}
	rule("i-", reject)

	// o-: from this host to the sandbox (resolver and proxy answers).
	rule("o-", jump("w-"+l.key))

	// n-: a policy with names sends every TCP connection but those to the
	// resolver through the proxy, which sees the name (TLS SNI, HTTP Host).
	if open && r.HasNames() {
		rule("n-", ipv4(), daddrNot(rs.svc), l4proto(unix.IPPROTO_TCP), dnat(rs.svc, rs.proxy))
	}

	name := l.ifname()
	for _, e := range []struct{ m, chain string }{
		{mapFwdIn, "f-"}, {mapFwdOut, "g-"}, {mapIn, "i-"}, {mapOut, "o-"}, {mapNAT, "n-"},
	} {
		if err := c.SetAddElements(rs.vmap(e.m), []nftables.SetElement{{Key: ifnameBytes(name), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: e.chain + l.key}}}); err != nil {
			return err
		}
	}
	return nil
}

// deniedSet is key's set of denied names' addresses (elements time out).
func (rs *ruleset) deniedSet(key string) *nftables.Set {
	return &nftables.Set{Table: rs.table, Name: "d-" + key, KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

// remove takes one sandbox's map elements and chains out, in the caller's
// batch. Chains must exist (list them first).
func (rs *ruleset) remove(c *nftables.Conn, key string, chains, sets []string) error {
	name := linkPrefix + key
	for _, m := range []string{mapFwdIn, mapFwdOut, mapIn, mapOut, mapNAT} {
		if err := c.SetDeleteElements(rs.vmap(m), []nftables.SetElement{{Key: ifnameBytes(name)}}); err != nil {
			return err
		}
	}
	// Rules jump to u-/w-: flush all first, then delete.
	for _, ch := range chains {
		c.FlushChain(rs.chain(ch))
	}
	for _, ch := range chains {
		c.DelChain(rs.chain(ch))
	}
	for _, set := range sets {
		c.DelSet(&nftables.Set{Table: rs.table, Name: set})
	}
	return nil
}

// allowedSet is what a policy's address rules reach: "internet" or its
// CIDRs, less its deny CIDRs and the never-reachable ranges.
func (rs *ruleset) allowedSet(r *netpolicy.Rules) *netipx.IPSet {
	var b netipx.IPSetBuilder
	if r.Internet {
		b.AddPrefix(netip.MustParsePrefix("0.0.0.0/0"))
	}
	for _, p := range r.AllowPrefix {
		b.AddPrefix(p)
	}
	for _, p := range r.DenyPrefix {
		b.RemovePrefix(p)
	}
	b.RemoveSet(rs.never)
	s, _ := b.IPSet()
	return s
}

// keyOf is the sandbox key of a per-sandbox chain's name, or "".
func keyOf(chain string) string {
	for _, k := range chainKinds {
		if rest, ok := strings.CutPrefix(chain, k); ok {
			return rest
		}
	}
	return ""
}

// --- expression helpers ---

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

func ifnameBytes(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// ifnameMatch matches the in/out interface name by prefix (no NUL: nft's
// "sbx*"), or its negation.
func ifnameMatch(key uint32, prefix string, negate bool) []expr.Any {
	op := expr.CmpOpEq
	if negate {
		op = expr.CmpOpNeq
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKey(key), Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte(prefix)}}
}

func dispatch(key expr.MetaKey, m *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Lookup{SourceRegister: 1, SetName: m.Name, DestRegister: 0, IsDestRegSet: true}}
}

func ipv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func nfprotoNot(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{p}}}
}

func saddrNot(ip netip.Addr) []expr.Any {
	a := ip.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: a[:]},
	}
}

func daddrInSet(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name},
	}
}

func dportInSet(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name},
	}
}

// intervalElements encodes set for an interval set: each range's first
// address, and the address after its last flagged as an end (none for a
// range that runs to 255.255.255.255).
func intervalElements(set *netipx.IPSet) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range set.Ranges() {
		from := r.From().As4()
		out = append(out, nftables.SetElement{Key: from[:]})
		if next := r.To().Next(); next.IsValid() && next.Is4() {
			n := next.As4()
			out = append(out, nftables.SetElement{Key: n[:], IntervalEnd: true})
		}
	}
	return out
}

func saddrIn(p netip.Prefix) []expr.Any { return addrIn(12, p) }

func addrIn(offset uint32, p netip.Prefix) []expr.Any {
	a := p.Masked().Addr().As4()
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = []byte{0, 0, 0, 0}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	}
}

func daddrIs(ip netip.Addr) []expr.Any {
	a := ip.As4()
	return cat(ipv4(), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	})
}

func daddrNot(ip netip.Addr) []expr.Any {
	a := ip.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: a[:]},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, SourceRegister: false, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// rejectAny answers a refused packet at once (a TCP reset, else ICMP
// administratively prohibited), so a refused connection fails fast
// instead of timing out.
func rejectAny() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}
}

func dnat(ip netip.Addr, port uint16) []expr.Any {
	a := ip.As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}
