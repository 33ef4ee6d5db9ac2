package egress

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
	"go4.org/netipx"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// Gateway is the egress gateway of a Kubernetes backend's sandbox pods:
// the same resolver and name-checking proxy as a gVisor sandbox's, run as
// a Deployment of the server's image in the sandbox namespace
// (internal/runtime/kube makes it). A NetworkPolicy matches addresses, not
// names, so a pod whose policy has name rules gets this instead:
//
//   - every sandbox pod's resolver is the gateway (dnsPolicy None); it
//     answers a pod only what the pod's policy resolves, with the upstream's
//     addresses less the never-reachable ranges and the deny list;
//   - a name the policy allows by name resolves to the gateway's own
//     address, the only address of no rule the pod's NetworkPolicy lets it
//     reach; the proxy there reads the name a connection is for (TLS SNI,
//     HTTP Host), and connects on, to the port the pod connected to, only
//     when the pod's policy allows that name on that port, and only to an
//     address the upstream answered for it;
//   - a raw address, another name behind an allowed one's address, the
//     metadata service, a private host, another resolver: the pod's
//     NetworkPolicy does not reach them, and the gateway never connects to
//     them for it.
//
// The gateway knows a pod by its address: the watcher (Set, Forget) keeps
// each sandbox pod's policy, which the server writes on the pod. A pod's
// address is its own: the network plugin gives each pod one, and a
// connection from a forged one never completes its handshake.
//
// What a NetworkPolicy cannot do is not pretended: a connection by name
// reaches its name only on the ports the gateway listens on, the policy's
// ports or, with none, 80 and 443 (GatewayPorts); a policy that denies a
// name inside "internet" or an allowed CIDR is refused by the backend (a
// raw connection to that name's address would pass the NetworkPolicy).
type Gateway struct {
	opts  GatewayOptions
	log   *slog.Logger
	never *netipx.IPSet
	up    string // upstream resolver
	slots slots  // upstream queries in flight (dns.go)

	mu      sync.Mutex
	byIP    map[netip.Addr]*gwPod
	byName  map[string]*gwPod
	changed chan struct{} // closed and replaced at each Set: lookups that wait for a pod
	ports   map[uint16]net.Listener
	closed  bool

	udp, tcp *dns.Server
}

// GatewayOptions configure a Gateway.
type GatewayOptions struct {
	// Self is the gateway's own address, which allowed names resolve to.
	Self netip.Addr
	// DNS is the upstream resolver (ip or ip:port); empty means the first
	// nameserver of /etc/resolv.conf.
	DNS string
	// Never are ranges no sandbox reaches on top of netpolicy.Never: the
	// cluster's own (its pods, services, nodes and apiserver).
	Never []netip.Prefix
	// Open are the private ranges the operator opened to policies.
	Open []netip.Prefix
	// DNSAddr is where the resolver listens (default ":53").
	DNSAddr string
}

// GatewayPorts are the ports a name is reached on when its policy names
// none.
var GatewayPorts = []uint16{80, 443}

// maxGatewayPorts bounds the ports the gateway listens on, over all
// policies (a policy names at most netpolicy.MaxPorts).
const maxGatewayPorts = 512

// waitUnknown is how long a query or connection from an address the
// gateway does not know waits for the watcher to learn it: a pod runs, and
// asks, before the watch delivers its address.
const waitUnknown = 3 * time.Second

// gwPod is one sandbox pod as the gateway sees it.
type gwPod struct {
	name    string
	ip      netip.Addr
	rules   *netpolicy.Rules // nil: no network
	answers map[string]answer
	conns   map[*gwConn]struct{}
}

// gwConn is a proxied connection of a pod.
type gwConn struct {
	name string // of its latest request
	port uint16
	cut  func()
}

// NewGateway starts the resolver and the proxy's listeners on
// GatewayPorts.
func NewGateway(opts GatewayOptions, log *slog.Logger) (*Gateway, error) {
	if !opts.Self.Is4() {
		return nil, fmt.Errorf("egress gateway: its own address %v is not IPv4", opts.Self)
	}
	if opts.DNSAddr == "" {
		opts.DNSAddr = ":53"
	}
	g := &Gateway{opts: opts, log: log, never: netpolicy.Never(opts.Open, opts.Never...),
		byIP: map[netip.Addr]*gwPod{}, byName: map[string]*gwPod{}, changed: make(chan struct{}), ports: map[uint16]net.Listener{}}
	var err error
	if opts.DNS != "" {
		g.up, err = upstream(opts.DNS)
	} else {
		g.up, err = resolvConf("/etc/resolv.conf")
	}
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenPacket("udp4", opts.DNSAddr)
	if err != nil {
		return nil, fmt.Errorf("egress gateway: %w", err)
	}
	ln, err := net.Listen("tcp4", opts.DNSAddr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("egress gateway: %w", err)
	}
	h := dns.HandlerFunc(g.serveDNS)
	g.udp, g.tcp = &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: ln, Handler: h}
	// Both serve before NewGateway returns: a Shutdown (Close) that came
	// before a server had started did nothing, and it served on, a
	// goroutine and a socket past Close (seen by goleak in CI).
	for _, up := range []<-chan error{serveDNS(g.udp), serveDNS(g.tcp)} {
		if err := <-up; err != nil {
			g.Close()
			return nil, fmt.Errorf("egress gateway: %w", err)
		}
	}
	if err := g.listen(GatewayPorts); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// resolvConf is the first IPv4 nameserver of the resolv.conf at path.
func resolvConf(path string) (string, error) {
	conf, err := dns.ClientConfigFromFile(path)
	if err == nil {
		for _, srv := range conf.Servers {
			if a, err := netip.ParseAddr(srv); err == nil && a.Is4() {
				return netip.AddrPortFrom(a, 53).String(), nil
			}
		}
	}
	return "", fmt.Errorf("egress gateway: no IPv4 nameserver in %s: pass the upstream resolver", path)
}

// serveDNS runs s, answering once it serves (nil) or could not start.
func serveDNS(s *dns.Server) <-chan error {
	up := make(chan error, 1)
	s.NotifyStartedFunc = func() { up <- nil }
	go func() {
		if err := s.ActivateAndServe(); err != nil {
			select {
			case up <- err:
			default: // it had started: Close's Shutdown
			}
		}
	}()
	return up
}

// Close stops the resolver and the listeners and cuts every connection.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	lns := g.ports
	g.ports = map[uint16]net.Listener{}
	var cuts []func()
	for _, p := range g.byName {
		for c := range p.conns {
			cuts = append(cuts, c.cut)
		}
	}
	g.mu.Unlock()
	if g.udp != nil {
		g.udp.Shutdown()
		g.tcp.Shutdown()
	}
	for _, ln := range lns {
		ln.Close()
	}
	for _, cut := range cuts {
		cut()
	}
	return nil
}

// Set says pod name at ip runs under rules (nil: no network). Its proxied
// connections that rules no longer allow are cut; what its resolver
// answered for names still allowed is kept.
func (g *Gateway) Set(name string, ip netip.Addr, rules *netpolicy.Rules) {
	ip = ip.Unmap()
	p := &gwPod{name: name, ip: ip, rules: rules, answers: map[string]answer{}, conns: map[*gwConn]struct{}{}}
	var cuts []func()
	g.mu.Lock()
	if old := g.byName[name]; old != nil {
		if g.byIP[old.ip] == old {
			delete(g.byIP, old.ip)
		}
		for c := range old.conns {
			if old.ip == ip && allows(rules, c.name, c.port) {
				p.conns[c] = struct{}{}
			} else {
				cuts = append(cuts, c.cut)
			}
		}
		if old.ip == ip {
			for n, a := range old.answers {
				if rules != nil && rules.NameAllowed(n) {
					p.answers[n] = a
				}
			}
		}
	}
	g.byName[name], g.byIP[ip] = p, p
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
	for _, cut := range cuts {
		cut()
	}
	if rules != nil && len(rules.AllowNames) > 0 && len(rules.Ports) > 0 {
		if err := g.listen(rules.Ports); err != nil {
			g.log.Warn("egress gateway: a policy's port", "pod", name, "err", err)
		}
	}
}

// Forget says pod name is gone: its connections are cut.
func (g *Gateway) Forget(name string) {
	g.mu.Lock()
	p := g.byName[name]
	if p == nil {
		g.mu.Unlock()
		return
	}
	delete(g.byName, name)
	if g.byIP[p.ip] == p {
		delete(g.byIP, p.ip)
	}
	var cuts []func()
	for c := range p.conns {
		cuts = append(cuts, c.cut)
	}
	g.mu.Unlock()
	for _, cut := range cuts {
		cut()
	}
}

// allows says rules let a connection by name through on port.
func allows(rules *netpolicy.Rules, name string, port uint16) bool {
	return rules != nil && name != "" && rules.NameAllowed(name) && rules.PortAllowed(port)
}

// pod is the pod at src, waiting up to waitUnknown for the watcher to
// learn of it; nil if none.
func (g *Gateway) pod(src netip.Addr) *gwPod {
	src = src.Unmap()
	deadline := time.NewTimer(waitUnknown)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		p, ch := g.byIP[src], g.changed
		g.mu.Unlock()
		if p != nil {
			return p
		}
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		}
	}
}

// current is the entry of p's pod now, if it is still at p's address.
func (g *Gateway) current(p *gwPod) *gwPod {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.byName[p.name]; cur != nil && cur.ip == p.ip {
		return cur
	}
	return nil
}

// listen opens the proxy's listeners on ports it does not listen on yet.
func (g *Gateway) listen(ports []uint16) error {
	var errs []error
	for _, port := range ports {
		g.mu.Lock()
		_, have := g.ports[port]
		full := len(g.ports) >= maxGatewayPorts
		closed := g.closed
		g.mu.Unlock()
		switch {
		case have || closed:
			continue
		case port == 53:
			errs = append(errs, errors.New("port 53 is the resolver's"))
			continue
		case full:
			errs = append(errs, fmt.Errorf("port %d: the gateway listens on %d ports already", port, maxGatewayPorts))
			continue
		}
		ln, err := net.Listen("tcp4", ":"+strconv.Itoa(int(port)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g.mu.Lock()
		if _, have := g.ports[port]; have || g.closed {
			g.mu.Unlock()
			ln.Close()
			continue
		}
		g.ports[port] = ln
		g.mu.Unlock()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go g.serveConn(c.(*net.TCPConn), port)
			}
		}()
	}
	return errors.Join(errs...)
}

// serveDNS answers one query of a pod, as the gVisor sandbox's resolver
// does (Manager.serveDNS), but for where a name allowed by name points: at
// the gateway itself.
func (g *Gateway) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	reply := new(dns.Msg)
	reply.SetReply(req)
	var p *gwPod
	if ap, err := netip.ParseAddrPort(w.RemoteAddr().String()); err == nil {
		p = g.pod(ap.Addr())
	}
	if p == nil || len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		reply.Rcode = dns.RcodeRefused
		w.WriteMsg(reply)
		return
	}
	q := req.Question[0]
	name, err := netpolicy.CanonicalDomain(q.Name)
	rules := p.rules
	if rules == nil {
		rules = &netpolicy.Rules{}
	}
	if err != nil || q.Qclass != dns.ClassINET || !rules.Resolves(name) || !forwardable(name) {
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
	resp, addrs, ttl, err := g.resolve(p, name, rules)
	if err != nil {
		reply.Rcode = dns.RcodeServerFailure
		w.WriteMsg(reply)
		return
	}
	reply.Rcode = resp.Rcode
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		reply.Rcode = dns.RcodeServerFailure
	}
	if rules.NameAllowed(name) {
		// Through the gateway: the pod reaches no address of the name
		// itself, and the proxy connects only to addrs.
		if len(addrs) > 0 {
			reply.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IP(g.opts.Self.AsSlice())}}
		}
	} else {
		// "internet": the addresses themselves, which the pod's
		// NetworkPolicy reaches.
		reply.Answer, _, _ = filterAnswer(dns.Fqdn(name), resp, func(ip netip.Addr) bool { return !rules.AddrDenied(ip, g.never) }, true)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		reply.Truncate(size)
	}
	w.WriteMsg(reply)
}

// resolve asks the upstream for name's addresses for p under rules: the
// answer, the addresses rules may reach, and their least TTL. Those of a
// name allowed by name are remembered for the proxy (for at least minTTL).
func (g *Gateway) resolve(p *gwPod, name string, rules *netpolicy.Rules) (*dns.Msg, []netip.Addr, uint32, error) {
	// At most maxInflight upstream queries of this pod at once, and
	// maxInflightAll of all: past either, a failure at once.
	if !g.slots.acquire(p.name) {
		return nil, nil, 0, errors.New("too many lookups in flight")
	}
	up := new(dns.Msg)
	up.SetQuestion(dns.Fqdn(name), dns.TypeA)
	up.RecursionDesired = true
	resp, err := exchange(up, func(network string) (net.Conn, error) { return net.DialTimeout(network, g.up, 3*time.Second) })
	g.slots.release(p.name)
	if err != nil {
		g.log.Debug("egress gateway: upstream resolver", "err", err)
		return nil, nil, 0, err
	}
	_, addrs, ttl := filterAnswer(dns.Fqdn(name), resp, func(ip netip.Addr) bool { return !rules.AddrDenied(ip, g.never) }, true)
	if len(addrs) > 0 && rules.NameAllowed(name) {
		g.remember(p, name, addrs, max(time.Duration(ttl)*time.Second, minTTL))
	}
	return resp, addrs, ttl, nil
}

// remember records addrs as name's for p's pod, for ttl (at most maxTTL),
// within the resolver's bounds (maxNames per pod).
func (g *Gateway) remember(p *gwPod, name string, addrs []netip.Addr, ttl time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.byName[p.name]
	if cur == nil || cur.ip != p.ip {
		return
	}
	e := &entry{answers: cur.answers}
	if _, known := cur.answers[name]; !known && len(cur.answers) >= maxNames {
		e.evict(time.Now())
	}
	cur.answers[name] = answer{addrs: slices.Clone(addrs), expires: time.Now().Add(min(ttl, maxTTL))}
}

// addrsFor are the addresses a connection of p by name on port may go to:
// none unless p's policy allows name on port; those the upstream answered
// for name within their TTL, else asked again now.
func (g *Gateway) addrsFor(p *gwPod, name string, port uint16) []netip.Addr {
	cur := g.current(p)
	if cur == nil || !allows(cur.rules, name, port) {
		return nil
	}
	g.mu.Lock()
	a, ok := cur.answers[name]
	g.mu.Unlock()
	if ok && time.Now().Before(a.expires) {
		return a.addrs
	}
	_, addrs, _, err := g.resolve(cur, name, cur.rules)
	if err != nil {
		return nil
	}
	return addrs
}

// serveConn proxies one connection a pod made to the gateway's port.
func (g *Gateway) serveConn(c *net.TCPConn, port uint16) {
	defer c.Close()
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return
	}
	p := g.pod(src.Addr())
	if p == nil {
		c.SetLinger(0)
		return
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	name, head, isHTTP := PeekName(c)
	c.SetReadDeadline(time.Time{})
	refuse := func() {
		g.log.Debug("egress gateway: connection refused by policy", "pod", p.name, "name", name, "port", port)
		if isHTTP {
			io.WriteString(c, forbidden)
		}
		c.SetLinger(0) // a reset: the client fails at once
	}
	addrs := g.addrsFor(p, name, port)
	if len(addrs) == 0 {
		refuse()
		return
	}
	var up *net.TCPConn
	var dst netip.Addr
	for _, a := range addrs {
		u, err := net.DialTimeout("tcp4", netip.AddrPortFrom(a, port).String(), 5*time.Second)
		if err == nil {
			up, dst = u.(*net.TCPConn), a
			break
		}
	}
	if up == nil {
		c.SetLinger(0)
		return
	}
	defer up.Close()
	gc := &gwConn{name: name, port: port, cut: func() {
		c.SetLinger(0)
		c.Close()
		up.Close()
	}}
	if !g.track(p, gc) {
		refuse()
		return
	}
	defer g.untrack(p, gc)
	splice(c, up, head, isHTTP, func(n string) bool {
		if n != name && !slices.Contains(g.addrsFor(p, n, port), dst) {
			g.log.Debug("egress gateway: request refused by policy", "pod", p.name, "name", n, "port", port)
			return false
		}
		g.mu.Lock()
		gc.name = n
		g.mu.Unlock()
		return true
	})
}

// track records c as a connection of p's pod if its policy still allows it
// (a change between the decision and now is judged here, not missed).
func (g *Gateway) track(p *gwPod, c *gwConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.byName[p.name]
	if cur == nil || cur.ip != p.ip || !allows(cur.rules, c.name, c.port) {
		return false
	}
	cur.conns[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(p *gwPod, c *gwConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.byName[p.name]; cur != nil {
		delete(cur.conns, c)
	}
}
