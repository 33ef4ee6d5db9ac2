package egress

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// clientHello is what a real TLS client sends first for serverName.
func clientHello(t testing.TB, serverName string) []byte {
	a, b := net.Pipe()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Handshake()
		a.Close()
	}()
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1<<16)
	n, _ := b.Read(buf)
	b.Close()
	return buf[:n]
}

func TestPeekName(t *testing.T) {
	hello := clientHello(t, "Allowed.Example")
	for _, c := range []struct {
		in   []byte
		name string
		http bool
	}{
		{hello, "allowed.example", false},
		{[]byte("GET /x HTTP/1.1\r\nHost: pypi.org:8080\r\nUser-Agent: t\r\n\r\n"), "pypi.org", true},
		{[]byte("GET / HTTP/1.1\r\nHost: 203.0.113.10\r\n\r\n"), "", true},
		{[]byte("SSH-2.0-OpenSSH_9.2\r\n"), "", false},
		{[]byte("GET / HTTP/1.1\r\nHost: bad_host!\r\n\r\n"), "", true},
		{clientHello(t, ""), "", false},
	} {
		name, head, isHTTP := PeekName(bytes.NewReader(c.in))
		if name != c.name || isHTTP != c.http {
			t.Errorf("PeekName(%.40q) = %q http=%v, want %q http=%v", c.in, name, isHTTP, c.name, c.http)
		}
		if !bytes.HasPrefix(c.in, head) || len(head) == 0 {
			t.Errorf("PeekName(%.40q): head %d bytes is not what was read", c.in, len(head))
		}
	}
	// Whatever is read is passed on, in order: the upstream sees the
	// client's first bytes unchanged.
	_, head, _ := PeekName(bytes.NewReader(hello))
	if !bytes.Equal(head, hello) {
		t.Errorf("head of a ClientHello: %d bytes, want all %d", len(head), len(hello))
	}
}

// FuzzPeekName: any first bytes give a canonical name or none, and the
// head is a prefix of what came (never more than the limit).
func FuzzPeekName(f *testing.F) {
	f.Add(clientHello(f, "allowed.example"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x.example\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		name, head, _ := PeekName(bytes.NewReader(in))
		if !bytes.HasPrefix(in, head) || len(head) > peekLimit {
			t.Fatalf("head is not a bounded prefix of the input")
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				t.Fatalf("name %q is not canonical", name)
			}
		}
	})
}
