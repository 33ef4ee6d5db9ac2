package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestReadRequestHead(t *testing.T) {
	for _, c := range []struct {
		in      string
		name    string
		body    string // what copyBody sends on
		err     error
		upgrade bool
	}{
		{in: "GET / HTTP/1.1\r\nHost: Allowed.Example:80\r\n\r\n", name: "allowed.example"},
		{in: "\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n", name: "a.example"},
		{in: "GET / HTTP/1.0\r\n\r\n", name: ""},
		{in: "GET / HTTP/1.1\r\nHost: 203.0.113.10\r\n\r\n", name: ""},
		{in: "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\nhelloGET", name: "a.example", body: "hello"},
		{in: "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\nGET", name: "a.example", body: "5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n"},
		{in: "GET /chat HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n", name: "a.example", upgrade: true},
		{in: "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", name: "a.example"},
		// Refused: what could be framed otherwise upstream.
		{in: "GET http://x.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", err: errFraming},
		{in: "GET http://x.example/ HTTP/1.1\r\n\r\n", err: errFraming},
		{in: "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", err: errFraming},
		{in: "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", err: errFraming},
		{in: "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", err: errFraming},
		{in: "GET / HTTP/1.1\nHost: a.example\n\n", err: errFraming},
		{in: "GET / HTTP/1.1\r\nHost: a.example\r\nHost: x.example\r\n\r\n", err: errFraming},
		{in: "CONNECT x.example:443 HTTP/1.1\r\nHost: x.example:443\r\n\r\n", err: errFraming},
		{in: "GET / HTTP/1.1\r\nHost: a.example\r\nX: " + strings.Repeat("a", lineLimit) + "\r\n\r\n", err: errFraming},
		{in: "GET / HTTP/1.1\r\nHost: a.example\r\n", err: io.ErrUnexpectedEOF},
		{in: "", err: io.EOF},
	} {
		br := bufio.NewReaderSize(strings.NewReader(c.in), lineLimit)
		h, err := readRequestHead(br)
		if !errors.Is(err, c.err) {
			t.Errorf("readRequestHead(%.60q): err %v, want %v", c.in, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if h.name != c.name || h.upgrade != c.upgrade || !strings.HasPrefix(strings.TrimLeft(c.in, "\r\n"), string(h.raw)) {
			t.Errorf("readRequestHead(%.60q) = name %q upgrade %v raw %q", c.in, h.name, h.upgrade, h.raw)
		}
		var body bytes.Buffer
		if err := copyBody(&body, br, h); err != nil || body.String() != c.body {
			t.Errorf("copyBody(%.60q) = %q, %v; want %q", c.in, body.String(), err, c.body)
		}
	}
}

// A smuggled request inside a body is never read as a head: the next head
// starts where the framing says.
func TestRelayFramesBodies(t *testing.T) {
	smuggled := "GET / HTTP/1.1\r\nHost: x.example\r\n\r\n"
	in := "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled) +
		"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n"
	br := bufio.NewReaderSize(strings.NewReader(in), lineLimit)
	var names []string
	for {
		h, err := readRequestHead(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.name)
		if err := copyBody(io.Discard, br, h); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(names, ",") != "a.example,b.example" {
		t.Errorf("heads read: %v", names)
	}
}

// FuzzReadRequestHead: any bytes give heads whose raw bytes are the
// input's, in order, with a canonical name or none, bodies framed
// within the input; the relay never passes on a byte it did not read.
func FuzzReadRequestHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET / HTTP/1.1\r\nHost: x.example\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabc"))
	f.Add([]byte("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), lineLimit)
		var out bytes.Buffer
		for range 64 {
			h, err := readRequestHead(br)
			if err != nil {
				break
			}
			if len(h.raw) > headLimit {
				t.Fatalf("a head of %d bytes", len(h.raw))
			}
			for i := 0; i < len(h.name); i++ {
				c := h.name[i]
				if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
					t.Fatalf("name %q is not canonical", h.name)
				}
			}
			out.Write(h.raw)
			if err := copyBody(&out, br, h); err != nil {
				break
			}
		}
		// What went on is the input less the skipped blank lines.
		if out.Len() > len(in) {
			t.Fatalf("sent on %d bytes of %d", out.Len(), len(in))
		}
	})
}
