package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/netpolicy"
)

// A plain-HTTP connection carries many requests, each with its own Host:
// a connection opened for an allowed name must not then ask the same
// address for a denied one. So the proxy relays plain HTTP request by
// request, reading each head and judging its name before a byte of it
// goes on, and frames the bodies itself to know where the next head
// starts. What it cannot frame for certain it refuses rather than pass on
// (a body the upstream could frame otherwise would smuggle a request past
// the check): both Content-Length and Transfer-Encoding, a transfer coding
// other than chunked, bare-LF line ends, CONNECT, an absolute URL whose
// host is not the Host header's. A protocol upgrade (WebSocket) is relayed
// as bytes once the upstream has answered 101, and only as a connection's
// first request.

// Bounds of a request head the relay reads before it judges it.
const (
	headLimit = 32 << 10
	lineLimit = 8 << 10
)

var errFraming = errors.New("egress: a request the proxy cannot frame for certain")

// requestHead is one request's head as the relay needs it.
type requestHead struct {
	raw     []byte // as it came, sent on unchanged
	name    string // the canonical name it is for; "" for none
	chunked bool
	length  int64 // body bytes when not chunked
	upgrade bool  // asks to switch protocols
}

// readLine reads one line, which must end in CRLF, of at most lineLimit
// bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, errFraming
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' || bytes.IndexByte(line[:len(line)-2], '\r') >= 0 {
		return nil, errFraming
	}
	return line, nil
}

// readRequestHead reads the next request's head from br (a reader of at
// least lineLimit bytes). io.EOF means the connection ended cleanly
// between requests. It is a parser of untrusted bytes
// (FuzzReadRequestHead); the request syntax is net/http's.
func readRequestHead(br *bufio.Reader) (requestHead, error) {
	var raw []byte
	var te, cl int
	var hostHdr string
	for blank := 0; ; {
		line, err := readLine(br)
		if err != nil {
			if err == io.EOF && len(raw) == 0 {
				return requestHead{}, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return requestHead{}, err
		}
		if len(raw) == 0 && len(line) == 2 {
			// An empty line before a request: RFC 9112 lets a server
			// skip a few (old clients send one after a body).
			if blank++; blank > 4 {
				return requestHead{}, errFraming
			}
			continue
		}
		if len(raw)+len(line) > headLimit {
			return requestHead{}, errFraming
		}
		raw = append(raw, line...)
		if len(line) == 2 {
			break
		}
		if len(raw) == len(line) {
			continue // the request line
		}
		k, v, ok := strings.Cut(string(line[:len(line)-2]), ":")
		if !ok {
			return requestHead{}, errFraming
		}
		switch strings.ToLower(k) {
		case "transfer-encoding":
			te++
		case "content-length":
			cl++
		case "host":
			hostHdr = strings.TrimSpace(v)
		}
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil || req.Method == http.MethodConnect || te > 1 || te > 0 && cl > 0 || req.ProtoMajor != 1 {
		return requestHead{}, errFraming
	}
	h := requestHead{raw: raw, length: req.ContentLength}
	if te == 1 {
		if len(req.TransferEncoding) != 1 || req.TransferEncoding[0] != "chunked" {
			return requestHead{}, errFraming
		}
		h.chunked, h.length = true, 0
	}
	if h.length < 0 {
		return requestHead{}, errFraming
	}
	// The name: the Host header's, and an absolute URL's host must agree
	// with it (a server may obey either).
	name := hostName(hostHdr)
	if u := req.URL.Host; u != "" {
		if hostHdr == "" || hostName(u) != name || name == "" && !strings.EqualFold(u, hostHdr) {
			return requestHead{}, errFraming
		}
	}
	h.name = name
	h.upgrade = req.Header.Get("Upgrade") != "" && headerHasToken(req.Header, "Connection", "upgrade")
	return h, nil
}

// hostName is the canonical name a Host value names, or "" (none, an
// address, not a name).
func hostName(host string) string {
	if host == "" {
		return ""
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return ""
	}
	d, err := netpolicy.CanonicalDomain(host)
	if err != nil {
		return ""
	}
	return d
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// copyBody sends h's body from br to w, as it came.
func copyBody(w io.Writer, br *bufio.Reader, h requestHead) error {
	if !h.chunked {
		n, err := io.CopyN(w, br, h.length)
		if err == io.EOF || err == nil && n != h.length {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	for {
		line, err := readLine(br)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		size, _, _ := strings.Cut(string(line[:len(line)-2]), ";")
		n, err := strconv.ParseInt(strings.TrimRight(size, " \t"), 16, 64)
		if err != nil || n < 0 || size == "" || strings.ContainsAny(size[:1], "+-") {
			return errFraming
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if c, err := io.CopyN(w, br, n); err != nil || c != n {
			return io.ErrUnexpectedEOF
		}
		crlf, err := readLine(br)
		if err != nil || len(crlf) != 2 {
			return errFraming
		}
		if _, err := w.Write(crlf); err != nil {
			return err
		}
	}
	// Trailers, to the empty line.
	for total := 0; ; {
		line, err := readLine(br)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if total += len(line); total > headLimit {
			return errFraming
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if len(line) == 2 {
			return nil
		}
	}
}

// relayHTTP sends the requests of a plain-HTTP connection from br to up,
// each judged by allow, with its own name, first. upgraded answers, once, whether
// the upstream switched protocols after a connection's first request (the
// response side reads it). It returns true when it stopped at a refused
// request (the caller answers 403 after the upstream's answers to what
// went before), false at the connection's end.
func relayHTTP(br *bufio.Reader, up io.Writer, firstUpgrade chan<- bool, upgraded <-chan bool, allow func(name string) bool) (refused bool) {
	for i := 0; ; i++ {
		h, err := readRequestHead(br)
		if i == 0 {
			firstUpgrade <- err == nil && h.upgrade
		}
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
		if h.upgrade && i > 0 || !allow(h.name) {
			return true
		}
		if _, err := up.Write(h.raw); err != nil {
			return false
		}
		if err := copyBody(up, br, h); err != nil {
			return errors.Is(err, errFraming)
		}
		if h.upgrade && <-upgraded {
			io.Copy(up, br) // another protocol now: bytes
			return false
		}
	}
}

// readStatus reads the upstream's first response line for a connection
// whose first request asked to upgrade, sends it to w, and reports
// whether it switched protocols.
func readStatus(ur *bufio.Reader, w io.Writer) (bool, error) {
	line, err := ur.ReadSlice('\n')
	if len(line) > 0 {
		if _, err := w.Write(line); err != nil {
			return false, err
		}
	}
	if err != nil {
		return false, err
	}
	return bytes.HasPrefix(line, []byte("HTTP/1.1 101 ")) || bytes.HasPrefix(line, []byte("HTTP/1.0 101 ")), nil
}
