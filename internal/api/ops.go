package api

import (
	"context"
	"errors"
	"github.com/sandboxd/sandbox/internal/files"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/interp"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

// typedOps registers the typed ops (POST /v1/sandbox/{op}, JSON in and out)
// under prefix p.
func (s *Server) typedOps(p string) {
	o := s.Ops
	s.handle("POST "+p+"/lease", op(o.Lease), opDoc(o.Lease, "Typed: lease, or resume and extend one of yours", onLease))
	s.handle("POST "+p+"/fork", op(o.Fork), opDoc(o.Fork, "Typed: fork a running sandbox: a new one that goes on from its memory and files (its processes too); a project sandbox's fork needs a new project",
		[]int{400, 402, 403, 404, 409, 429, 501, 502, 503}))
	s.handle("POST "+p+"/run", op(o.Run), opDoc(o.Run, "Typed: run a command and wait for it", onFiles))
	s.handle("POST "+p+"/read", op(o.Read), opDoc(o.Read, "Typed: read a file (at most 4 MiB) or list a directory", onFiles))
	s.handle("POST "+p+"/write", op(o.Write), opDoc(o.Write, "Typed: write a whole file", onFiles))
	s.handle("POST "+p+"/stop", op(o.Stop), opDoc(o.Stop, "Typed: stop every command running in a sandbox", onSandbox))
	s.handle("POST "+p+"/end", op(o.End), opDoc(o.End, "Typed: end a sandbox", []int{404, 409, 502}))
	s.handle("POST "+p+"/process_start", op(o.ProcessStart), opDoc(o.ProcessStart, "Typed: start a background process; it runs on after the call, its output kept", onProcess))
	s.handle("POST "+p+"/process_list", op(o.ProcessList), opDoc(o.ProcessList, "Typed: a sandbox's background processes, running and finished", onProcess))
	s.handle("POST "+p+"/process_output", op(o.ProcessOutput), opDoc(o.ProcessOutput, "Typed: what a background process wrote after an offset, at once, and the offset to ask from next", onProcess))
	s.handle("POST "+p+"/process_stdin", op(o.ProcessStdin), opDoc(o.ProcessStdin, "Typed: write text to a background process's stdin (eof closes it)", onProcess))
	s.handle("POST "+p+"/process_signal", op(o.ProcessSignal), opDoc(o.ProcessSignal, "Typed: send a signal (TERM by default) to a background process and its group", onProcess))
	s.handle("POST "+p+"/snapshot", op(o.Snapshot), opDoc(o.Snapshot, "Typed: save a sandbox's filesystem (what it changed in its root; with workdir, its workdir) as an image of the org that leases and run_code start from",
		[]int{400, 403, 404, 409, 501, 502}))
	s.handle("POST "+p+"/network", op(o.Network), opDoc(o.Network, "Typed: replace the egress policy of a sandbox leased with a network (an empty allow list closes it); new connections follow it at once",
		[]int{400, 403, 404, 409, 501}))
	s.handle("POST "+p+"/preview_link", op(o.PreviewLink), opDoc(o.PreviewLink, "Typed: mint a preview link to a port of a sandbox: URLs (host form and path form) that open it in a browser with no key until expiresAt or the sandbox's end",
		[]int{404, 409, 501}))
	s.handle("POST "+p+"/images", op(o.ListImages), opDoc(o.ListImages, "Typed: the images the org may lease, its own then the server's", []int{501}))
}

// op adapts a typed operation to a handler: one JSON object in, one out.
// opDoc documents op(f): its body is In, its answer Out.
func opDoc[In, Out any](f func(context.Context, In) (Out, error), summary string, errs []int) doc {
	return doc{Summary: summary, Body: typ[In](), Answer: typ[Out](), Errors: errs}
}

func op[In, Out any](f func(context.Context, In) (Out, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var in In
		if err := decode(r.Body, &in); err != nil {
			return err
		}
		out, err := f(r.Context(), in)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// interpreter registers POST /v1/exec and the file routes of its sandboxes (the
// route's {session} is the wire's first name for the sandbox's id, kept).
func (s *Server) interpreter() {
	s.handle("POST /v1/exec", op(s.Ops.RunCode), opDoc(s.Ops.RunCode, "Run a program in one of the interpreter's 13 languages", onLease))
	s.handle("GET /v1/exec/{session}/files", s.sessionFiles, doc{Summary: "The files of an interpreter sandbox's workdir", Answer: typ[filesBody](), Errors: onSandbox})
	s.handle("POST /v1/exec/{session}/files", s.uploadFiles, doc{Summary: "Upload files (multipart/form-data) into an interpreter sandbox's workdir", BodyRaw: "multipart/form-data", Answer: typ[filesBody](), Errors: onFiles})
	s.handle("GET /v1/exec/{session}/files/{path...}", s.downloadFile, doc{Summary: "Download one of an interpreter sandbox's files", AnswerRaw: "application/octet-stream", Errors: onFiles})
}

type filesBody struct {
	SandboxID string        `json:"session_id"`
	Files     []interp.File `json:"files"`
}

func (s *Server) sessionFiles(w http.ResponseWriter, r *http.Request) error {
	files, err := s.Interpreter.Files(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, filesBody{SandboxID: r.PathValue("session"), Files: files})
	return nil
}

// maxUpload bounds one multipart upload (each file is also bounded by
// files.MaxFileBytes).
const maxUpload = 256 << 20

// uploadFiles writes every file part of a multipart/form-data body into the
// sandbox's workdir under the part's file name.
func (s *Server) uploadFiles(w http.ResponseWriter, r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return sandbox.Errorf(sandbox.KindInvalid, "send the files as multipart/form-data (curl -F file=@name)")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		return sandbox.Errorf(sandbox.KindInvalid, "malformed multipart body")
	}
	id := r.PathValue("session")
	written := []interp.File{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return uploadError(err, written)
		}
		name := part.FileName() // the base name only: the part cannot pick a directory
		if name == "" {
			part.Close()
			continue
		}
		res, err := s.Files.Write(r.Context(), id, name, part, -1)
		part.Close()
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return uploadError(err, written)
			}
			return err
		}
		written = append(written, interp.File{Path: name, Size: res.Bytes})
	}
	if len(written) == 0 {
		return sandbox.Errorf(sandbox.KindInvalid, "no file parts in the body (curl -F file=@name)")
	}
	writeJSON(w, http.StatusOK, filesBody{SandboxID: id, Files: written})
	return nil
}

// uploadError says why an upload stopped, and which files made it.
func uploadError(err error, written []interp.File) error {
	done := ""
	if len(written) > 0 {
		names := make([]string, len(written))
		for i, f := range written {
			names[i] = f.Path
		}
		done = "; written before it: " + strings.Join(names, ", ")
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return sandbox.Errorf(sandbox.KindTooLarge, "the upload is larger than %d bytes%s", maxUpload, done)
	}
	return sandbox.Errorf(sandbox.KindInvalid, "malformed multipart body%s", done)
}

func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Files.ReadTo(r.Context(), r.PathValue("session"), r.PathValue("path"), 0, func(f files.FileHead) (io.Writer, error) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": baseName(f.Path)}))
		h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
		w.WriteHeader(http.StatusOK)
		return w, nil
	})
	if errors.Is(err, files.ErrStreamBroken) {
		s.log.Warn("a download stopped mid-answer", "sandbox", r.PathValue("session"), "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if res.Dir {
		return sandbox.Errorf(sandbox.KindInvalid, "%s is a directory; GET /v1/exec/{session}/files lists the files", res.Path)
	}
	return nil
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
