package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandboxd/sandbox/internal/files"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/wire"
)

func (s *Server) lease(w http.ResponseWriter, r *http.Request) error {
	var req service.LeaseRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	sb, err := s.Leases.Lease(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) error {
	var req service.ForkRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	sb, err := s.Leases.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

type listBody = wire.Page

func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return sandbox.Errorf(sandbox.KindInvalid, "limit must be 1-%d", service.MaxPage)
		}
		limit = n
	}
	var meta map[string]string
	for k, v := range q {
		if key, ok := strings.CutPrefix(k, "metadata."); ok {
			if meta == nil {
				meta = map[string]string{}
			}
			meta[key] = v[len(v)-1]
		}
	}
	list, next, err := s.Leases.List(r.Context(), service.ListRequest{
		Project: q.Get("project"), Status: q.Get("status"), Limit: limit, Cursor: q.Get("cursor"), Metadata: meta,
	})
	if err != nil {
		return err
	}
	body := listBody{Sandboxes: make([]*sandbox.Object, len(list)), Next: next}
	for i, sb := range list {
		body.Sandboxes[i] = sb.Object()
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.Leases.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	var p netpolicy.Policy
	if err := decode(r.Body, &p); err != nil {
		return err
	}
	sb, err := s.Leases.SetNetwork(r.Context(), r.PathValue("id"), &p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb.Object())
	return nil
}

func (s *Server) setMetadata(w http.ResponseWriter, r *http.Request) error {
	var m map[string]string
	if err := decode(r.Body, &m); err != nil {
		return err
	}
	sb, err := s.Leases.SetMetadata(r.Context(), r.PathValue("id"), m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb.Object())
	return nil
}

type renewRequest struct {
	TTLSec int64 `json:"ttlSec"`
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) error {
	var req renewRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	sb, err := s.Leases.Renew(r.Context(), r.PathValue("id"), req.TTLSec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) end(w http.ResponseWriter, r *http.Request) error {
	purge, err := boolParam(r.URL.Query().Get("purge"))
	if err != nil {
		return err
	}
	res, err := s.Leases.End(r.Context(), r.PathValue("id"), purge)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func boolParam(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "", "0", "false", "no":
		return false, nil
	case "1", "true", "yes":
		return true, nil
	}
	return false, sandbox.Errorf(sandbox.KindInvalid, "purge must be 1 or 0, not %q", v)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var req service.ExecRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	if wantsStream(r) {
		return s.execStream(w, r, req)
	}
	res, err := s.Work.Exec(r.Context(), r.PathValue("id"), req, nil, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// readFS answers a file's bytes as application/octet-stream, streamed from
// the sandbox with its Content-Length, or a directory's entries one per
// line as text/plain; X-Sandbox-Kind says which.
func (s *Server) readFS(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Files.ReadTo(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), 0, func(f files.FileHead) (io.Writer, error) {
		fsHead(w, f.Path, f.Woken, "file", "application/octet-stream", f.Size)
		return w, nil
	})
	if errors.Is(err, files.ErrStreamBroken) {
		s.log.Warn("a file read stopped mid-answer", "sandbox", r.PathValue("id"), "err", err)
		return nil // the answer is short of its length: the client sees it cut
	}
	if err != nil {
		return err
	}
	if res.Dir {
		fsHead(w, res.Path, res.Woken, "directory", "text/plain; charset=utf-8", int64(len(res.Data)))
		w.Write(res.Data)
	}
	return nil // a file has been streamed
}

// fsHead writes the head of a GET /fs answer: what was read, how and how
// long.
func fsHead(w http.ResponseWriter, path string, woken bool, kind, contentType string, size int64) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Sandbox-Path", path)
	if woken {
		h.Set("X-Sandbox-Woken", "1")
	}
	h.Set("Content-Type", contentType)
	h.Set("X-Sandbox-Kind", kind)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
}

func (s *Server) archive(w http.ResponseWriter, r *http.Request) error {
	gz, err := boolParam(r.URL.Query().Get("gzip"))
	if err != nil {
		return err
	}
	err = s.Files.Archive(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), gz, func(full string) io.Writer {
		h := w.Header()
		h.Set("Content-Type", map[bool]string{false: "application/x-tar", true: "application/gzip"}[gz])
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Sandbox-Path", full)
		w.WriteHeader(http.StatusOK)
		return w
	})
	if errors.Is(err, files.ErrStreamBroken) {
		return nil // the answer is cut short: the client sees a broken tar
	}
	return err
}

func (s *Server) extract(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Files.Extract(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), r.Body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) writeFS(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Files.Write(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), r.Body, r.ContentLength)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

type usageBody struct {
	Usage []store.Usage `json:"usage"`
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	u, err := s.Quotas.Usage(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, usageBody{Usage: u})
	return nil
}

// onID adapts a call on the sandbox of the path's {id} that takes an empty
// body (stop, pause, resume) to a handler answering its result as JSON.
// onIDDoc documents onID(f): no body, its answer Out.
func onIDDoc[Out any](f func(context.Context, string) (Out, error), summary string) doc {
	return doc{Summary: summary, Answer: typ[Out](), Errors: onSandbox}
}

func onID[Out any](f func(context.Context, string) (Out, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := decode(r.Body, &struct{}{}); err != nil {
			return err
		}
		out, err := f(r.Context(), r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// watchFS answers a directory's changes as server-sent events until the
// caller goes: "ready" once the watch is in place, then each change, a
// ping comment every 15 s of quiet. An id names the watch and a place in
// it: a caller resuming after one (Last-Event-ID) gets what it missed
// (files.Watch).
func (s *Server) watchFS(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	recursive := false
	if v := q.Get("recursive"); v != "" {
		var err error
		if recursive, err = strconv.ParseBool(v); err != nil {
			return sandbox.Errorf(sandbox.KindInvalid, "recursive must be 1 or 0")
		}
	}
	rc := http.NewResponseController(w)
	var mu sync.Mutex
	send := func(id, event string, data any) error {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(data)
		rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", id, event, b); err != nil {
			return err
		}
		return rc.Flush()
	}
	done := make(chan struct{})
	defer close(done)
	started := false
	err := s.Files.Watch(r.Context(), r.PathValue("id"), q.Get("path"), recursive, r.Header.Get("Last-Event-ID"), func(dir, at string) error {
		started = true
		startSSE(w)
		io.WriteString(w, "retry: 1000\n\n")
		go func() {
			t := time.NewTicker(15 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					mu.Lock()
					rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
					io.WriteString(w, ": ping\n\n")
					rc.Flush()
					mu.Unlock()
				}
			}
		}()
		return send(at, "ready", files.FileEvent{Type: "ready", Name: dir})
	}, func(at string, ev files.FileEvent) error { return send(at, ev.Type, ev) })
	if started {
		if err != nil {
			s.log.Warn("a file watch ended", "sandbox", r.PathValue("id"), "err", err)
		}
		return nil // the stream has begun: its end is the answer
	}
	return err
}
