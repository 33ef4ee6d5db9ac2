package interp

import (
	"bytes"
	"io"
)

// maxTrailer bounds what is kept after the nonce (MaxFiles names of up to
// 4 KiB each would be 4 MiB; a real list is far shorter).
const maxTrailer = 1 << 20

// Splitter passes the program's stdout on to Out until the nonce shows up
// and keeps what follows as the trailer. It finds a nonce split across
// writes by holding back the shortest tail that could begin it.
type Splitter struct {
	Out     io.Writer
	nonce   []byte
	held    []byte
	found   bool
	trailer bytes.Buffer
}

// NewSplitter returns a Splitter looking for nonce.
func NewSplitter(out io.Writer, nonce string) *Splitter {
	return &Splitter{Out: out, nonce: []byte(nonce)}
}

func (s *Splitter) Write(p []byte) (int, error) {
	if s.found {
		if room := maxTrailer - s.trailer.Len(); room > 0 {
			s.trailer.Write(p[:min(len(p), room)])
		}
		return len(p), nil
	}
	buf := append(s.held, p...)
	if i := bytes.Index(buf, s.nonce); i >= 0 {
		s.found = true
		s.held = nil
		s.Out.Write(buf[:i])
		s.Write(buf[i+len(s.nonce):])
		return len(p), nil
	}
	keep := 0
	for k := min(len(s.nonce)-1, len(buf)); k > 0; k-- {
		if bytes.HasPrefix(s.nonce, buf[len(buf)-k:]) {
			keep = k
			break
		}
	}
	s.Out.Write(buf[:len(buf)-keep])
	s.held = append(s.held[:0:0], buf[len(buf)-keep:]...)
	return len(p), nil
}

// Trailer returns what followed the nonce; ok is false when the nonce never
// came (the run was killed, or the sandbox died). Without a nonce, the
// held-back tail is the program's and is passed on.
func (s *Splitter) Trailer() (b []byte, ok bool) {
	if !s.found {
		s.Out.Write(s.held)
		s.held = nil
		return nil, false
	}
	return s.trailer.Bytes(), true
}
