package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/sandboxd/sandbox/internal/processes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/internal/ops"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// Processes is what the background process routes need.
type Processes interface {
	StartProcess(ctx context.Context, id string, req processes.ProcessRequest) (*processes.Process, error)
	Processes(ctx context.Context, id string) ([]processes.Process, error)
	GetProcess(ctx context.Context, id string, pid int) (*processes.Process, error)
	ProcessOutput(ctx context.Context, id string, pid int, from int64, follow bool, emit func(processes.OutputEvent) error) error
	ProcessStdin(ctx context.Context, id string, pid int, r io.Reader, eof bool) (*processes.StdinResult, error)
	SignalProcess(ctx context.Context, id string, pid int, sig string) (*processes.Process, error)
	ResizeProcess(ctx context.Context, id string, pid int, size processes.ResizeRequest) (*processes.Process, error)
}

var _ Processes = (*processes.Processes)(nil)

type processesBody struct {
	Processes []processes.Process `json:"processes"`
}

var onProcess = []int{400, 404, 409, 501, 502}

func (s *Server) processRoutes(p string) {
	pp := p + "/{id}/processes"
	s.handle("POST "+pp, s.startProcess, doc{Summary: "Start a background process: it runs on when the caller goes, its output is kept (the last 1 MiB) and its record outlives a server restart",
		Body: typ[processes.ProcessRequest](), Answer: typ[processes.Process](), Status: 201, Errors: onProcess})
	s.handle("GET "+pp, s.listProcesses, doc{Summary: "The sandbox's background processes, running and finished, oldest first", Answer: typ[processesBody](), Errors: onProcess})
	s.handle("GET "+pp+"/{pid}", s.getProcess, doc{Summary: "One background process", Answer: typ[processes.Process](), Errors: onProcess})
	s.handle("GET "+pp+"/{pid}/output", s.processOutput, doc{Summary: "A process's output from the start (what the 1 MiB ring still holds; an event 'dropped' says how much it does not), then live, as server-sent events " +
		"(event stdout/stderr, data {\"stdout\"} or {\"stdoutBase64\"} as in a streamed exec; id: the offset to resume from with Last-Event-ID; event 'end' with the process's record). " +
		"With Accept: application/json: what is kept after ?from= at once, and the offset to ask from next",
		AnswerRaw: "text/event-stream", Answer: typ[ops.OutputOut](),
		Query: []string{"from: the output offset to start after (or send Last-Event-ID)", "follow: 0 to end the stream at what is kept now"}, Errors: onProcess})
	s.handle("POST "+pp+"/{pid}/stdin", s.processStdin, doc{Summary: "Write the body to the process's stdin (eof=1 then closes it; a tty process gets ^D)", BodyRaw: "application/octet-stream",
		Answer: typ[processes.StdinResult](), Query: []string{"eof: 1 closes stdin after the body"}, Errors: append(onProcess, 413)})
	s.handle("POST "+pp+"/{pid}/signal", s.signalProcess, doc{Summary: "Send a signal to the process and its group", Body: typ[processes.SignalRequest](), Answer: typ[processes.Process](), Errors: onProcess})
	s.handle("POST "+pp+"/{pid}/resize", s.resizeProcess, doc{Summary: "Resize a tty process's terminal", Body: typ[processes.ResizeRequest](), Answer: typ[processes.Process](), Errors: onProcess})
}

func pidOf(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		return 0, sandbox.Errorf(sandbox.KindNotFound, "no process %q in this sandbox", r.PathValue("pid"))
	}
	return pid, nil
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) error {
	var req processes.ProcessRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	p, err := s.Processes.StartProcess(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, p)
	return nil
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Processes.Processes(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, processesBody{Processes: list})
	return nil
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) error {
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	p, err := s.Processes.GetProcess(r.Context(), r.PathValue("id"), pid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request) error {
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	eof, err := flagParam(r, "eof")
	if err != nil {
		return err
	}
	res, err := s.Processes.ProcessStdin(r.Context(), r.PathValue("id"), pid, r.Body, eof)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) error {
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	var req processes.SignalRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	p, err := s.Processes.SignalProcess(r.Context(), r.PathValue("id"), pid, req.Signal)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request) error {
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	var req processes.ResizeRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	p, err := s.Processes.ResizeProcess(r.Context(), r.PathValue("id"), pid, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// flagParam reads a 0/1 (or true/false) query parameter; absent is false.
func flagParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, sandbox.Errorf(sandbox.KindInvalid, "%s must be 1 or 0", name)
	}
	return b, nil
}

// processOutput streams a process's output as server-sent events, or with
// Accept: application/json answers what is kept at once.
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request) error {
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	from := int64(0)
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("from")
	}
	if last != "" {
		if from, err = strconv.ParseInt(last, 10, 64); err != nil || from < 0 {
			return sandbox.Errorf(sandbox.KindInvalid, "the offset (from, Last-Event-ID) must be an offset from this stream")
		}
	}
	id := r.PathValue("id")
	if accept := r.Header.Get("Accept"); strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/event-stream") {
		return s.outputJSON(w, r, id, pid, from)
	}
	follow := true
	if v := r.URL.Query().Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			return sandbox.Errorf(sandbox.KindInvalid, "follow must be 1 or 0")
		}
	}
	rc := http.NewResponseController(w)
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		startSSE(w)
		io.WriteString(w, "retry: 1000\n\n")
	}
	err = s.Processes.ProcessOutput(r.Context(), id, pid, from, follow, func(ev processes.OutputEvent) error {
		start()
		var b []byte
		switch ev.Kind {
		case "stdout", "stderr":
			b, _ = json.Marshal(chunkOf(ev.Kind, ev.Data))
		case "dropped":
			b, _ = json.Marshal(map[string]int64{"droppedBytes": ev.Bytes})
		case "end", "state":
			b, _ = json.Marshal(ev.Process)
		case "ping":
			if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
				return err
			}
			return rc.Flush()
		default:
			return nil
		}
		rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Offset, ev.Kind, b); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && !started {
		return err
	}
	if err != nil {
		// The stream has started: say why it ends; the client resumes
		// from its last id.
		b, _ := json.Marshal(errorBody{Error: sandbox.Message(err)})
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
	}
	return nil
}

// chunkOf is a streamed chunk of one stream: text when it is UTF-8, else
// base64 (as a streamed exec sends it).
func chunkOf(stream string, data []byte) streamChunk {
	var c streamChunk
	text := utf8.Valid(data)
	switch {
	case stream == "stdout" && text:
		c.Stdout = string(data)
	case stream == "stdout":
		c.StdoutBase64 = base64.StdEncoding.EncodeToString(data)
	case text:
		c.Stderr = string(data)
	default:
		c.StderrBase64 = base64.StdEncoding.EncodeToString(data)
	}
	return c
}

func (s *Server) outputJSON(w http.ResponseWriter, r *http.Request, id string, pid int, from int64) error {
	out, err := ops.CollectOutput(r.Context(), s.Processes, id, pid, from)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// startSSE begins a 200 answer of server-sent events: never cached, and
// never buffered by a proxy in front (nginx's X-Accel-Buffering).
func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}
