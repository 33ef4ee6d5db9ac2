package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// proxy is where a policy with domain rules sends the sandbox's TCP
// connections (nftables DNAT to the service address): it learns the name
// from the first bytes and connects on to the original destination only
// when the policy allows that name at that address.
type proxy struct{ ln net.Listener }

func (p *proxy) close() { p.ln.Close() }

// peekLimit bounds what the proxy reads before it knows the name.
const peekLimit = 16 << 10

func (m *Manager) startProxy() (*proxy, error) {
	var ln net.Listener
	if err := m.inUplink(func() error {
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(m.rs.svc, ProxyPort).String())
		return err
	}); err != nil {
		return nil, err
	}
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go m.serveConn(c.(*net.TCPConn))
		}
	}()
	return p, nil
}

func (m *Manager) serveConn(c *net.TCPConn) {
	defer c.Close()
	dst, err := originalDst(c)
	if err != nil {
		return
	}
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return
	}
	e := m.lookup(src.Addr())
	if e == nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	name, head, isHTTP := PeekName(c)
	c.SetReadDeadline(time.Time{})
	ok, byName := m.allowConn(e, name, dst)
	if !ok {
		m.log.Debug("egress: connection refused by policy", "key", e.key, "name", name, "dst", dst)
		if isHTTP {
			io.WriteString(c, forbidden)
		}
		c.SetLinger(0) // a reset: the client fails at once
		return
	}
	var up net.Conn
	if err := m.inUplink(func() error {
		var err error
		up, err = net.DialTimeout("tcp4", dst.String(), 15*time.Second)
		return err
	}); err != nil {
		c.SetLinger(0)
		return
	}
	defer up.Close()
	f := &flow{dst: dst, name: name, byName: byName, cut: func() {
		c.SetLinger(0)
		c.Close()
		up.Close()
	}}
	defer m.track(e.key, f)()
	// Tracked before the policy is read again: a change between the
	// decision and the tracking is judged here, not missed.
	if ok, _ := m.allowConn(e, name, dst); !ok {
		c.SetLinger(0)
		return
	}

	splice(c, up.(*net.TCPConn), head, isHTTP, func(name string) bool {
		ok, byName := m.allowConn(e, name, dst)
		if !ok {
			m.log.Debug("egress: request refused by policy", "key", e.key, "name", name, "dst", dst)
			return false
		}
		m.setFlowName(f, name, byName)
		return true
	})
}

// splice relays the connection c (whose first bytes, head, were read to
// learn its name) to up until both ends are done. A plain-HTTP
// connection's requests are each judged by allow first (relayHTTP): at a
// refused one the answers to the requests before it are passed on, then a
// 403, and nothing more goes up.
func splice(c, up *net.TCPConn, head []byte, isHTTP bool, allow func(name string) bool) {
	done := make(chan struct{})
	var refused bool
	firstUpgrade, upgraded := make(chan bool, 1), make(chan bool, 1)
	go func() {
		defer close(done)
		if isHTTP {
			br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(head), c), lineLimit)
			refused = relayHTTP(br, up, firstUpgrade, upgraded, allow)
		} else if _, err := up.Write(head); err == nil {
			io.Copy(up, c)
		}
		up.CloseWrite()
		if refused {
			// The answers to the requests before the refused one, then
			// the 403; an upstream that keeps its side open is not
			// waited for long.
			up.SetReadDeadline(time.Now().Add(10 * time.Second))
		}
	}()
	ur := bufio.NewReader(up)
	if isHTTP {
		select {
		case first := <-firstUpgrade:
			if first {
				sw, err := readStatus(ur, c)
				upgraded <- sw && err == nil
			}
		case <-done:
		}
	}
	io.Copy(c, ur)
	select {
	case upgraded <- false: // unblocks a relay still waiting for the status
	default:
	}
	<-done
	if refused {
		io.WriteString(c, forbidden)
		c.CloseWrite()
		// What the client sent after the refused request is read, not
		// left unread: closing over unread bytes would reset the
		// connection, and the client might lose the 403.
		c.SetReadDeadline(time.Now().Add(time.Second))
		io.CopyN(io.Discard, c, 1<<16)
		return
	}
	c.CloseWrite()
}

const forbiddenBody = "not allowed by this sandbox's network policy\n"

// forbidden is the proxy's answer to a refused plain-HTTP request.
var forbidden = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(forbiddenBody)) + "\r\nConnection: close\r\n\r\n" + forbiddenBody

// allowConn is the proxy's decision for a connection (or a plain-HTTP
// request) to dst under name ("" when it named none), and whether it is
// let through by its name.
func (m *Manager) allowConn(e *entry, name string, dst netip.AddrPort) (ok, byName bool) {
	cur := m.current(e)
	if cur == nil {
		return false, false
	}
	return m.judge(cur, name, dst, name != "" && m.answered(cur, name, dst.Addr().Unmap()), true)
}

// judge decides under cur's policy: the deny list and the never ranges
// refuse; an allowed name admits only an address the resolver answered
// for it (answered); an address learned for a denied name is refused to
// any other (denied.go; wait: for the first lookups of the deny list); the
// policy's address rules admit the rest.
func (m *Manager) judge(cur *entry, name string, dst netip.AddrPort, answered, wait bool) (ok, byName bool) {
	r, ip := cur.rules, dst.Addr().Unmap()
	if r == nil || !r.PortAllowed(dst.Port()) || r.AddrDenied(ip, m.rs.never) || !m.routedOut(ip) {
		return false, false
	}
	if name != "" && r.NameDenied(name) {
		return false, false
	}
	if name != "" && r.NameAllowed(name) && answered {
		return true, true
	}
	if m.deniedAddr(cur, ip, wait) {
		return false, false
	}
	return r.AddrAllowed(ip, m.rs.never), false
}

// routedOut reports whether the uplink routes ip out as unicast: the
// proxy connects from this host, so an address of the host itself (any
// of its interfaces', the control API's) or a broadcast must be refused
// here — forwarded traffic meets the input chain instead.
func (m *Manager) routedOut(ip netip.Addr) bool {
	m.routeMu.Lock()
	routes, err := m.routes.RouteGet(net.IP(ip.AsSlice()))
	m.routeMu.Unlock()
	if err != nil || len(routes) == 0 {
		return false
	}
	for _, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			return false
		}
	}
	return true
}

// originalDst is where the sandbox meant to connect before the DNAT.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		mreq, err := unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		// A sockaddr_in: family, port (big-endian), address.
		b := mreq.Multiaddr
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	return out, errors.Join(err, serr)
}

// PeekName reads the start of a connection and returns the host name it
// is for — a TLS ClientHello's SNI, or an HTTP request's Host — canonical,
// or "" when it names none (another protocol, a bare IP, a malformed or
// over-long start); head is every byte read, to be sent on. It is the
// parser of untrusted bytes (FuzzPeekName): the TLS parsing is Go's own.
func PeekName(r io.Reader) (name string, head []byte, isHTTP bool) {
	var rec bytes.Buffer
	lr := io.TeeReader(io.LimitReader(r, peekLimit), &rec)
	br := bufio.NewReaderSize(lr, 4096)
	first, err := br.Peek(1)
	if err != nil {
		return "", rec.Bytes(), false
	}
	var host string
	if first[0] == 0x16 { // a TLS handshake record
		errSeen := errors.New("seen")
		cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			host = h.ServerName
			return nil, errSeen
		}}
		tls.Server(readOnlyConn{br}, cfg).Handshake()
	} else if req, err := http.ReadRequest(br); err == nil {
		isHTTP = true
		host = req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	if host == "" {
		return "", rec.Bytes(), isHTTP
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return "", rec.Bytes(), isHTTP // an address is not a name
	}
	d, err := netpolicy.CanonicalDomain(host)
	if err != nil {
		return "", rec.Bytes(), isHTTP
	}
	return d, rec.Bytes(), isHTTP
}

// readOnlyConn lets crypto/tls read a ClientHello and write nothing.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (readOnlyConn) Write(p []byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                       { return nil }
func (readOnlyConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (readOnlyConn) SetDeadline(t time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(t time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(t time.Time) error { return nil }
