package runtime

import (
	"bytes"
	"io"
)

// TTYInput is one of a terminal's inputs: keys, or (Keys nil) a new size.
type TTYInput struct {
	Keys []byte
	Size Size
}

// maxKeys is the most bytes of keys in one TTYInput (the kube runner takes
// frames of up to 64 KiB).
const maxKeys = 32 << 10

// TTYInputs is a terminal's keys, read from stdin (nil: none), and its
// sizes, from resize (nil: none), as one sequence in the order the caller
// sent them: a size waiting when keys come goes before them. (The terminal
// handler queues a resize at once and keys behind the ones before them, so
// a size sent before some keys is waiting by the time they are read.) A
// backend that applies the sequence in order gives a program that reads
// `stty size` typed right after a resize the new size. Sizes with a side
// of 0 are dropped. The sequence ends when stdin does, or at stop.
func TTYInputs(stdin io.Reader, resize <-chan Size, stop <-chan struct{}) <-chan TTYInput {
	out := make(chan TTYInput)
	var keys chan []byte // nil without a stdin: never delivers
	if stdin != nil {
		keys = make(chan []byte)
		go func() {
			defer close(keys)
			buf := make([]byte, maxKeys)
			for {
				n, err := stdin.Read(buf)
				if n > 0 {
					select {
					case keys <- bytes.Clone(buf[:n]): // keys are a few bytes
					case <-stop:
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	go func() {
		defer close(out)
		send := func(in TTYInput) bool {
			if in.Keys == nil && (in.Size.Cols == 0 || in.Size.Rows == 0) {
				return true
			}
			select {
			case out <- in:
				return true
			case <-stop:
				return false
			}
		}
		for {
			select {
			case sz, ok := <-resize:
				if !ok {
					resize = nil
				} else if !send(TTYInput{Size: sz}) {
					return
				}
			case b, ok := <-keys:
				if !ok {
					return
				}
				// The sizes sent before these keys go first.
				for waiting := true; waiting; {
					select {
					case sz, ok := <-resize:
						if !ok {
							resize, waiting = nil, false
						} else if !send(TTYInput{Size: sz}) {
							return
						}
					default:
						waiting = false
					}
				}
				if !send(TTYInput{Keys: b}) {
					return
				}
			case <-stop:
				return
			}
		}
	}()
	return out
}
