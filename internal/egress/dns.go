package egress

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// resolver is the sandboxes' DNS server, on the service address.
type resolver struct{ udp, tcp *dns.Server }

func (r *resolver) close() {
	r.udp.Shutdown()
	r.tcp.Shutdown()
}

// minTTL is how long an answered address stays allowed at least: programs
// cache answers past a short TTL (Java for 30 s, say) and would find a
// connection refused under them.
const minTTL = 60 * time.Second

func (m *Manager) startResolver() (*resolver, error) {
	addr := netip.AddrPortFrom(m.rs.svc, 53).String()
	var pc net.PacketConn
	var ln net.Listener
	err := m.inUplink(func() error {
		var err error
		if pc, err = net.ListenPacket("udp4", addr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return nil, err
	}
	h := dns.HandlerFunc(m.serveDNS)
	r := &resolver{udp: &dns.Server{PacketConn: pc, Handler: h}, tcp: &dns.Server{Listener: ln, Handler: h}}
	go r.udp.ActivateAndServe()
	go r.tcp.ActivateAndServe()
	return r, nil
}

// serveDNS answers one query of a sandbox: an address query for a name its
// policy allows is asked upstream, the answer filtered (filterAnswer: the
// CNAME chain and the A records at its end that the policy may reach, no
// other record), and the addresses left remembered for the proxy; any
// other name does not exist for it, and any other query type is refused
// without reaching the upstream (split DNS, service records and reverse
// zones are this host's, not a sandbox's).
func (m *Manager) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	reply := new(dns.Msg)
	reply.SetReply(req)
	ap, err := netip.ParseAddrPort(w.RemoteAddr().String())
	e := (*entry)(nil)
	if err == nil {
		e = m.lookup(ap.Addr())
	}
	if e == nil || len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		reply.Rcode = dns.RcodeRefused
		w.WriteMsg(reply)
		return
	}
	q := req.Question[0]
	name, err := netpolicy.CanonicalDomain(q.Name)
	rules := e.rules
	if rules == nil {
		rules = &netpolicy.Rules{}
	}
	if err != nil || q.Qclass != dns.ClassINET || !rules.Resolves(name) || !forwardable(name) {
		if err == nil && forwardable(name) {
			m.queriedDenied(e, name, q.Qtype) // denied.go
		}
		blocked(reply, dns.RcodeNameError)
		w.WriteMsg(reply)
		return
	}
	switch q.Qtype {
	case dns.TypeA:
	case dns.TypeAAAA:
		w.WriteMsg(reply) // no IPv6 egress: no such address
		return
	default:
		blocked(reply, dns.RcodeRefused)
		w.WriteMsg(reply)
		return
	}
	// At most maxInflight upstream queries of this sandbox at once, and
	// maxInflightAll of all: past either, SERVFAIL at once (a stub resolver
	// tries again), so a flood costs a refusal, not a socket.
	if !m.dnsSlots.acquire(e.key) {
		reply.Rcode = dns.RcodeServerFailure
		w.WriteMsg(reply)
		return
	}
	up := new(dns.Msg)
	up.SetQuestion(dns.Fqdn(name), dns.TypeA)
	up.RecursionDesired = true
	resp, err := m.exchange(up)
	m.dnsSlots.release(e.key)
	if err != nil {
		m.log.Debug("egress: upstream resolver", "err", err)
		reply.Rcode = dns.RcodeServerFailure
		w.WriteMsg(reply)
		return
	}
	m.screenAnswer(e, name, resp) // denied.go
	reply.Rcode = resp.Rcode
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		reply.Rcode = dns.RcodeServerFailure
	}
	answer, addrs, ttl := filterAnswer(dns.Fqdn(name), resp, func(ip netip.Addr) bool { return !rules.AddrDenied(ip, m.rs.never) }, m.bounded())
	reply.Answer = answer
	if len(addrs) > 0 && rules.NameAllowed(name) {
		m.remember(e, name, addrs, max(time.Duration(ttl)*time.Second, minTTL))
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		// What the asker can take over UDP (512 bytes without EDNS); the
		// rest it asks again over TCP.
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		reply.Truncate(size)
	}
	w.WriteMsg(reply)
}

// blocked makes reply a refusal the policy made, said in an extended DNS
// error (RFC 8914) so a person reading dig's output knows why.
func blocked(reply *dns.Msg, rcode int) {
	reply.Rcode = rcode
	reply.SetEdns0(1232, false)
	reply.IsEdns0().Option = append(reply.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: "not allowed by this sandbox's network policy"})
}

// localZones are names no sandbox asks the upstream: they are this host's
// or its network's (RFC 6761 and RFC 6762 special-use names, ICANN's
// private-use .internal, the reverse and home zones under .arpa), so an
// upstream answers them from the host's side (split DNS, mDNS) if at all.
var localZones = []string{"localhost", "local", "internal", "invalid", "arpa", "onion", "lan", "home"}

// forwardable says the upstream may be asked about name: a name of at
// least two labels (a single label is a search-list or LLMNR name, this
// host's network's) outside the local zones.
func forwardable(name string) bool {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return false
	}
	return !slices.Contains(localZones, name[dot+1:])
}

// Bounds of what one query's answer may carry and how long it counts.
const (
	// maxAddrs is how many A records of one answer a sandbox gets and
	// the proxy remembers (the rest are dropped: a real name has a few).
	maxAddrs = 32
	// maxTTL caps every answer's TTL, so a name's addresses are asked
	// again and an answer of a year is not remembered for one.
	maxTTL = time.Hour
	// maxChain is how many CNAMEs an answer's chain may have.
	maxChain = 8
)

// filterAnswer is what a sandbox gets of resp, the upstream's answer to
// the A query for qname (fully qualified): the CNAME chain from qname and
// the A records of the chain's end that allow admits, at most maxAddrs of
// them if limit, each TTL at most maxTTL. Nothing else passes — no other
// record type, no record of a name off the chain, no authority or
// additional section — so no record carries an address the policy does not
// reach. addrs are the A records kept, ttl the least TTL of the answer
// kept (0 if no address).
func filterAnswer(qname string, resp *dns.Msg, allow func(netip.Addr) bool, limit bool) (answer []dns.RR, addrs []netip.Addr, ttl uint32) {
	capTTL := func(t uint32) uint32 { return min(t, uint32(maxTTL/time.Second)) }
	target := qname
	var chain []dns.RR
	least := uint32(maxTTL / time.Second)
	for range maxChain + 1 {
		next := ""
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && c.Hdr.Class == dns.ClassINET && strings.EqualFold(c.Hdr.Name, target) {
				if _, err := netpolicy.CanonicalDomain(c.Target); err != nil {
					return nil, nil, 0 // a target that is no host name ends nowhere
				}
				next = c.Target
				chain = append(chain, &dns.CNAME{Hdr: dns.RR_Header{Name: c.Hdr.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: capTTL(c.Hdr.Ttl)}, Target: c.Target})
				least = min(least, capTTL(c.Hdr.Ttl))
				break
			}
		}
		if next == "" {
			break
		}
		if len(chain) > maxChain {
			return nil, nil, 0 // a loop, or too long to follow
		}
		target = next
	}
	for _, rr := range resp.Answer {
		a, ok := rr.(*dns.A)
		if !ok || a.Hdr.Class != dns.ClassINET || !strings.EqualFold(a.Hdr.Name, target) {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.A.To4())
		if !ok || !allow(ip) || slices.Contains(addrs, ip) {
			continue
		}
		if limit && len(addrs) == maxAddrs {
			break
		}
		addrs = append(addrs, ip)
		t := capTTL(a.Hdr.Ttl)
		least = min(least, t)
		answer = append(answer, &dns.A{Hdr: dns.RR_Header{Name: a.Hdr.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: t}, A: net.IP(ip.AsSlice())})
	}
	if len(addrs) == 0 {
		return chain, nil, 0
	}
	return append(chain, answer...), addrs, least
}

// exchange asks the upstream resolver from the uplink namespace, over UDP
// and again over TCP when the answer was truncated.
func (m *Manager) exchange(q *dns.Msg) (*dns.Msg, error) {
	return exchange(q, func(network string) (net.Conn, error) {
		var c net.Conn
		err := m.inUplink(func() error {
			var err error
			c, err = net.DialTimeout(network, m.up, 3*time.Second)
			return err
		})
		return c, err
	})
}

// exchange asks q of the resolver dial reaches, over UDP and again over
// TCP when the answer was truncated.
func exchange(q *dns.Msg, dial func(network string) (net.Conn, error)) (*dns.Msg, error) {
	var resp *dns.Msg
	for _, network := range []string{"udp4", "tcp4"} {
		c, err := dial(network)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		co := &dns.Conn{Conn: c}
		err = co.WriteMsg(q)
		if err == nil {
			resp, err = co.ReadMsg()
		}
		c.Close()
		if err != nil {
			return nil, err
		}
		if !resp.Truncated {
			break
		}
	}
	return resp, nil
}

// Bounds of the upstream queries in flight: each holds a goroutine and a
// socket for up to the exchange's deadline, so a sandbox asking unique
// names of an upstream that never answers would otherwise hold as many as
// it can send.
const (
	maxInflight    = 16  // per sandbox
	maxInflightAll = 256 // all sandboxes
)

// slots counts the upstream queries in flight, per sandbox key and in all.
type slots struct {
	off   bool // no bounds (Options.NoResolverBounds)
	mu    sync.Mutex
	n     int
	byKey map[string]int
}

// acquire takes a slot for key, or reports that none is free.
func (s *slots) acquire(key string) bool {
	if s.off {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= maxInflightAll || s.byKey[key] >= maxInflight {
		return false
	}
	if s.byKey == nil {
		s.byKey = map[string]int{}
	}
	s.n++
	s.byKey[key]++
	return true
}

// release gives key's slot back.
func (s *slots) release(key string) {
	if s.off {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.byKey[key]--; s.byKey[key] <= 0 {
		delete(s.byKey, key)
	}
}

// bounded says the resolver's bounds hold (Options.NoResolverBounds).
func (m *Manager) bounded() bool { return !m.opts.NoResolverBounds }
