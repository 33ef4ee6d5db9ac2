package api

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandbox/internal/contexts"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// Contexts is what the code context routes need.
type Contexts interface {
	Create(ctx context.Context, id string, req wire.ContextRequest) (*wire.CodeContext, error)
	List(ctx context.Context, id string) ([]wire.CodeContext, error)
	Delete(ctx context.Context, id, ctxID string) (*wire.CodeContext, error)
	Interrupt(ctx context.Context, id, ctxID string) (*wire.CodeContext, error)
	Run(ctx context.Context, id, ctxID string, req wire.ContextRunRequest, emit func(wire.ContextEvent) error) (*wire.Execution, error)
}

var _ Contexts = (*contexts.Contexts)(nil)

var onContext = []int{400, 404, 409, 413, 501, 502, 504}

func (s *Server) contextRoutes(p string) {
	cp := p + "/{id}/contexts"
	s.handle("POST "+cp, s.createContext, doc{Summary: "Open a code context: a Jupyter kernel (python on ipykernel, r on IRkernel; the exec image has them) that keeps its variables, imports and working directory between runs. " +
		"It lives in the sandbox's memory: it survives sleep and is carried by a fork where memory is kept, and a stop ends it",
		Body: typ[wire.ContextRequest](), Answer: typ[wire.CodeContext](), Status: 201, Errors: onContext})
	s.handle("GET "+cp, s.listContexts, doc{Summary: "The sandbox's code contexts, oldest first", Answer: typ[wire.ContextsBody](), Errors: onContext})
	s.handle("DELETE "+cp+"/{ctx}", s.deleteContext, doc{Summary: "End a code context and its kernel", Answer: typ[wire.CodeContext](), Errors: onContext})
	s.handle("POST "+cp+"/{ctx}/interrupt", s.interruptContext, doc{Summary: "Interrupt the context's run (as Jupyter does: the run ends with a KeyboardInterrupt, the state stays)", Answer: typ[wire.CodeContext](), Errors: onContext})
	s.handle("POST "+cp+"/{ctx}/run", s.runContext, doc{Summary: "Run code in a context and answer its output and rich results (a MIME bundle each: a figure as image/png, a frame as text/html; isMainResult for the last expression's value) or its error. " +
		"A language's name (python, r) as the context is its default context, opened on first use. Past timeoutSec the kernel is interrupted and the state kept. " +
		`With Accept: application/x-ndjson the answer streams: a line {"type": "stdout"|"stderr", "text"}, {"type": "result", "data", "isMainResult"} or {"type": "error", "error"} as each comes, then {"type": "end", "executionCount", "timedOut"}`,
		Body: typ[wire.ContextRunRequest](), Answer: typ[wire.Execution](), AnswerRaw: ndjson, Errors: onContext})
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) error {
	var req wire.ContextRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	c, err := s.Contexts.Create(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Contexts.List(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContextsBody{Contexts: list})
	return nil
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) error {
	c, err := s.Contexts.Delete(r.Context(), r.PathValue("id"), r.PathValue("ctx"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (s *Server) interruptContext(w http.ResponseWriter, r *http.Request) error {
	c, err := s.Contexts.Interrupt(r.Context(), r.PathValue("id"), r.PathValue("ctx"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// runContext answers a run as JSON, or as NDJSON while it runs. Refusals
// before the first event are ordinary error answers; once the stream has
// begun, an error is its last line ({"type": "error"} then no end).
func (s *Server) runContext(w http.ResponseWriter, r *http.Request) error {
	var req wire.ContextRunRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	if !wantsStream(r) {
		ex, err := s.Contexts.Run(r.Context(), r.PathValue("id"), r.PathValue("ctx"), req, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, ex)
		return nil
	}
	l := &lineWriter{w: w, rc: http.NewResponseController(w)}
	started := false
	_, err := s.Contexts.Run(r.Context(), r.PathValue("id"), r.PathValue("ctx"), req, func(e wire.ContextEvent) error {
		if !started {
			started = true
			w.Header().Set("Content-Type", ndjson)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		return l.line(e)
	})
	if err != nil && !started {
		return err
	}
	if err != nil {
		l.line(wire.ContextEvent{Type: "error", Error: &wire.ExecutionError{Name: "SandboxError", Value: sandbox.Message(err), Traceback: []string{}}})
	}
	return nil
}
