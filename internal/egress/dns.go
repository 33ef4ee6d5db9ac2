package egress

import (
	"net"
	"net/netip"
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

// serveDNS answers one query of a sandbox: a name its policy allows is
// asked upstream, an answer in a never-reachable range dropped (a public
// name must not lead into this host's networks), and what is left is
// remembered for the proxy; any other name does not exist for it.
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
	if err != nil || q.Qclass != dns.ClassINET || !rules.Resolves(name) {
		reply.Rcode = dns.RcodeNameError
		reply.SetEdns0(1232, false)
		reply.IsEdns0().Option = append(reply.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: "not allowed by this sandbox's network policy"})
		w.WriteMsg(reply)
		return
	}
	if q.Qtype == dns.TypeAAAA {
		w.WriteMsg(reply) // no IPv6 egress: no such address
		return
	}
	up := new(dns.Msg)
	up.SetQuestion(dns.Fqdn(name), q.Qtype)
	up.RecursionDesired = true
	resp, err := m.exchange(up)
	if err != nil {
		m.log.Debug("egress: upstream resolver", "err", err)
		reply.Rcode = dns.RcodeServerFailure
		w.WriteMsg(reply)
		return
	}
	reply.Rcode = resp.Rcode
	var addrs []netip.Addr
	var ttl uint32
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, ok := netip.AddrFromSlice(a.A.To4())
			if !ok || rules.AddrDenied(ip, m.rs.never) {
				continue
			}
			addrs = append(addrs, ip)
			if ttl == 0 || a.Hdr.Ttl < ttl {
				ttl = a.Hdr.Ttl
			}
		}
		if _, ok := rr.(*dns.AAAA); ok {
			continue
		}
		reply.Answer = append(reply.Answer, rr)
	}
	if len(addrs) > 0 && rules.NameAllowed(name) {
		m.remember(e, name, addrs, max(time.Duration(ttl)*time.Second, minTTL))
	}
	w.WriteMsg(reply)
}

// exchange asks the upstream resolver from the uplink namespace, over UDP
// and again over TCP when the answer was truncated.
func (m *Manager) exchange(q *dns.Msg) (*dns.Msg, error) {
	var resp *dns.Msg
	for _, network := range []string{"udp4", "tcp4"} {
		var c net.Conn
		if err := m.inUplink(func() error {
			var err error
			c, err = net.DialTimeout(network, m.up, 3*time.Second)
			return err
		}); err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		co := &dns.Conn{Conn: c}
		err := co.WriteMsg(q)
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
