package main

// ring keeps the last cap bytes a process wrote, as chunks tagged with
// their stream, each at its offset in the one sequence of everything the
// process wrote (stdout and stderr interleaved as they came). An offset
// names a place in that sequence for good: a reader that has seen up to
// offset o asks for what follows o, and learns how much was dropped if the
// ring no longer reaches back that far.
type ring struct {
	cap    int
	size   int // bytes kept
	end    int64
	chunks []chunk
}

type chunk struct {
	stream byte // 1 stdout, 2 stderr
	off    int64
	data   []byte
}

func newRing(cap int) *ring { return &ring{cap: cap} }

// write appends data (copied) and drops the oldest bytes beyond cap.
func (r *ring) write(stream byte, data []byte) {
	if len(data) == 0 {
		return
	}
	if len(data) > r.cap {
		skip := len(data) - r.cap
		r.end += int64(skip)
		data = data[skip:]
	}
	if n := len(r.chunks); n > 0 && r.chunks[n-1].stream == stream && len(r.chunks[n-1].data)+len(data) <= maxChunk {
		r.chunks[n-1].data = append(r.chunks[n-1].data, data...)
	} else {
		r.chunks = append(r.chunks, chunk{stream: stream, off: r.end, data: append([]byte(nil), data...)})
	}
	r.end += int64(len(data))
	r.size += len(data)
	for r.size > r.cap {
		c := &r.chunks[0]
		over := r.size - r.cap
		if over >= len(c.data) {
			r.size -= len(c.data)
			r.chunks[0] = chunk{}
			r.chunks = r.chunks[1:]
			continue
		}
		c.data = c.data[over:]
		c.off += int64(over)
		r.size -= over
	}
}

// start is the offset of the oldest byte kept: everything before it was
// dropped.
func (r *ring) start() int64 { return r.end - int64(r.size) }

// since returns the chunks holding the bytes after offset from (the first
// one cut to start there), and how many bytes after from were dropped.
func (r *ring) since(from int64) (out []chunk, dropped int64) {
	if from < 0 {
		from = 0
	}
	if s := r.start(); from < s {
		dropped, from = s-from, s
	}
	for _, c := range r.chunks {
		cend := c.off + int64(len(c.data))
		if cend <= from {
			continue
		}
		if c.off < from {
			c = chunk{stream: c.stream, off: from, data: c.data[from-c.off:]}
		}
		out = append(out, c)
	}
	return out, dropped
}

// maxChunk bounds one chunk (and so one frame of output).
const maxChunk = 32 << 10
