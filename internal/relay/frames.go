package relay

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// frames hands yamux's send loop a connection that writes a data frame's
// header and body with one write: the library writes them with two, and
// over the relay each write crosses the exec's pipe — a wake-up of the
// sentry and of the reader inside gVisor, or of the server's reader going
// out. A data header (version 0, type 0, a length above 0: its body comes
// next, from the same goroutine) is held and written in front of the
// body; every other write (window updates, pings, a go-away, the hello)
// passes through as it comes. The bytes on the wire are the same.
type frames struct {
	io.ReadWriteCloser
	held bool
	buf  []byte
}

// headerLen is a yamux frame header's size (version, type, flags, stream
// id, length); maxJoined bounds the body copied behind a held header (a
// larger body is written on its own: the copy would cost more than the
// write it saves).
const (
	headerLen = 12
	maxJoined = 32 << 10
)

func newFrames(rwc io.ReadWriteCloser) *frames {
	return &frames{ReadWriteCloser: rwc, buf: make([]byte, 0, headerLen+4096)}
}

func (f *frames) Write(p []byte) (int, error) {
	if f.held {
		f.held = false
		if len(p) > maxJoined {
			if _, err := f.ReadWriteCloser.Write(f.buf); err != nil {
				return 0, err
			}
			return f.ReadWriteCloser.Write(p)
		}
		f.buf = append(f.buf, p...)
		n, err := f.ReadWriteCloser.Write(f.buf)
		return max(n-headerLen, 0), err
	}
	if len(p) == headerLen && p[0] == 0 && p[1] == 0 && binary.BigEndian.Uint32(p[8:]) > 0 {
		f.buf = append(f.buf[:0], p...)
		f.held = true
		return len(p), nil
	}
	return f.ReadWriteCloser.Write(p)
}

// guard reads the runner's frames as the server's end receives them and
// ends the session on a flood the library would turn into the server's
// memory. yamux answers each ping from a goroutine of its own that waits
// up to its write timeout (10 s) to queue the answer: a runner that sends
// pings and stops reading (code in the sandbox can stop the relay and
// write to its pipe) would have the server start a goroutine per 12
// bytes. And it keeps every stream the runner opens, with what was sent
// on it, until both ends have closed it: the streams are bounded at the
// moment the runner opens one.
type guard struct {
	hdr     [headerLen]byte
	have    int    // header bytes read so far
	skip    uint32 // body bytes still to pass
	pings   int    // ping requests since window
	window  time.Time
	streams func() int // the session's open streams; nil: not yet known
}

// The guard's bounds: the runner's own keep-alive pings once per
// KeepAliveInterval; the streams are the API socket's calls (maxInward at
// once at the pool's) and the server's own previews, with room to spare.
const (
	maxPings    = 16
	pingWindow  = 15 * time.Second
	maxStreams  = 1024
	typeData    = 0
	typeWindow  = 1
	typePing    = 2
	flagSYN     = 1
	errFloodFmt = "relay: the runner sent %s: the session is ended"
)

func (g *guard) scan(p []byte) error {
	for len(p) > 0 {
		if g.skip > 0 {
			n := min(uint32(len(p)), g.skip)
			g.skip -= n
			p = p[n:]
			continue
		}
		n := copy(g.hdr[g.have:], p)
		g.have += n
		p = p[n:]
		if g.have < headerLen {
			return nil
		}
		g.have = 0
		typ, flags := g.hdr[1], binary.BigEndian.Uint16(g.hdr[2:4])
		switch {
		case typ == typeData:
			g.skip = binary.BigEndian.Uint32(g.hdr[8:12])
		case typ == typePing && flags&flagSYN != 0:
			if now := time.Now(); now.Sub(g.window) > pingWindow {
				g.window, g.pings = now, 0
			}
			if g.pings++; g.pings > maxPings {
				return fmt.Errorf(errFloodFmt, fmt.Sprintf("more than %d pings in %s", maxPings, pingWindow))
			}
		}
		if (typ == typeData || typ == typeWindow) && flags&flagSYN != 0 && g.streams != nil && g.streams() >= maxStreams {
			return fmt.Errorf(errFloodFmt, fmt.Sprintf("a stream beyond %d open", maxStreams))
		}
	}
	return nil
}

// guarded is the server's end of the wire: frames to write, the guard on
// what is read.
type guarded struct {
	*frames
	g guard
}

func (c *guarded) Read(p []byte) (int, error) {
	n, err := c.frames.Read(p)
	if gerr := c.g.scan(p[:n]); gerr != nil {
		return 0, gerr
	}
	return n, err
}
