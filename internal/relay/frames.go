package relay

import (
	"encoding/binary"
	"io"
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
