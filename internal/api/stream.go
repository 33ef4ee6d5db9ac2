package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

// ndjson is the media type of a streamed exec answer.
const ndjson = "application/x-ndjson"

// wantsStream says the caller asked for the exec answer as a stream.
func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), ndjson)
}

// streamChunk is one line of a streamed exec answer: output as it came
// ("stdout"/"stderr" when the chunk is UTF-8, else "stdoutBase64"/
// "stderrBase64" with the bytes as standard base64), then one last line
// with the exit (the fields of ExecResult but the output), or "error" when
// the command could not run to its end.
type streamChunk struct {
	Stdout       string `json:"stdout,omitempty"`
	Stderr       string `json:"stderr,omitempty"`
	StdoutBase64 string `json:"stdoutBase64,omitempty"`
	StderrBase64 string `json:"stderrBase64,omitempty"`
}

type streamEnd struct {
	ExitCode *int   `json:"exitCode,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Stopped  bool   `json:"stopped,omitempty"`
	Woken    bool   `json:"woken,omitempty"`
	Error    string `json:"error,omitempty"`
}

// lineWriter writes a stream's lines, one at a time and flushed: stdout and
// stderr come from two goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (l *lineWriter) line(v any) error {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return l.rc.Flush()
}

// channel is one output stream of the program as chunk lines.
type channel struct {
	l      *lineWriter
	stderr bool
}

func (c channel) Write(p []byte) (int, error) {
	stream := "stdout"
	if c.stderr {
		stream = "stderr"
	}
	if err := c.l.line(chunkOf(stream, p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// execStream answers an exec as NDJSON while the program runs. Refusals
// before it starts are ordinary error answers; once the stream has begun,
// an error is its last line.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, req service.ExecRequest) error {
	l := &lineWriter{w: w, rc: http.NewResponseController(w)}
	started := false
	begin := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", ndjson)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
			l.rc.Flush()
		}
	}
	out, errw := &startWriter{begin: begin, w: channel{l: l}}, &startWriter{begin: begin, w: channel{l: l, stderr: true}}
	res, err := s.Work.Exec(r.Context(), r.PathValue("id"), req, out, errw)
	if err != nil && !started {
		return err
	}
	begin()
	if err != nil {
		l.line(streamEnd{Error: sandbox.Message(err)})
		return nil
	}
	l.line(streamEnd{ExitCode: &res.ExitCode, TimedOut: res.TimedOut, Stopped: res.Stopped, Woken: res.Woken})
	return nil
}

// startWriter begins the answer on the first byte of output, so that a
// refusal (an unknown id, a full quota) is still a plain error answer.
type startWriter struct {
	once  sync.Once
	begin func()
	w     io.Writer
}

func (s *startWriter) Write(p []byte) (int, error) {
	s.once.Do(s.begin)
	return s.w.Write(p)
}
