package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/sandboxd/sandbox/wire"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Sandbox is the Sandbox object. Its times are Unix seconds (the wire's);
// Created, LastUsed and Expires convert them. MemoryKept is present only
// for a sleeping, woken or forked sandbox (KeptMemory reads it as a bool).
type Sandbox = wire.Sandbox

// LeaseRequest asks for a sandbox; every field may be left out.
type LeaseRequest = wire.LeaseRequest

// Lease leases a sandbox.
func (c *Client) Lease(ctx context.Context, req LeaseRequest) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "POST", path: "/v1/sandbox", in: req, out: &sb})
}

// ForkRequest asks for a fork of a running sandbox; every field may be
// left out but Project for a project sandbox.
type ForkRequest = wire.ForkRequest

// Fork leases a new sandbox that goes on from running sandbox id's memory
// and files at this instant (its processes too) while id runs on; a
// backend that cannot checkpoint answers 501.
func (c *Client) Fork(ctx context.Context, id string, req ForkRequest) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/fork", in: req, out: &sb})
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id), out: &sb})
}

// ListOptions filter and page a list; every field may be left out.
type ListOptions struct {
	Project, Status string
	Limit           int
	Cursor          string            // a page's Next
	Metadata        map[string]string // only those whose metadata has each key with its value
}

// Page is one page of a list; Next is empty on the last.
type Page = wire.Page

// List returns one page of the org's sandboxes, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (*Page, error) {
	q := url.Values{}
	for k, v := range map[string]string{"project": o.Project, "status": o.Status, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	for k, v := range o.Metadata {
		q.Set("metadata."+k, v)
	}
	var p Page
	return &p, c.do(ctx, request{method: "GET", path: "/v1/sandbox", query: q, out: &p})
}

// ListAll returns every sandbox of the org, page by page.
func (c *Client) ListAll(ctx context.Context, o ListOptions) ([]Sandbox, error) {
	var all []Sandbox
	for {
		p, err := c.List(ctx, o)
		if err != nil {
			return nil, err
		}
		for _, sb := range p.Sandboxes {
			if sb != nil {
				all = append(all, *sb)
			}
		}
		if p.Next == "" {
			return all, nil
		}
		o.Cursor = p.Next
	}
}

// Renew extends a lease to ttlSec from now (never past the ceiling).
func (c *Client) Renew(ctx context.Context, id string, ttlSec int64) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/renew", in: map[string]int64{"ttlSec": ttlSec}, out: &sb})
}

// SetMetadata replaces a sandbox's metadata (an empty map clears it).
func (c *Client) SetMetadata(ctx context.Context, id string, m map[string]string) (*Sandbox, error) {
	if m == nil {
		m = map[string]string{}
	}
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "PUT", path: "/v1/sandbox/" + esc(id) + "/metadata", in: m, out: &sb})
}

// Sleep puts a sandbox to sleep now: its memory is kept where the
// backend can checkpoint (MemoryKept says).
func (c *Client) Sleep(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/sleep", out: &sb})
}

// Wake wakes a sleeping sandbox now (any exec, file call or renew wakes
// it too).
func (c *Client) Wake(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/wake", out: &sb})
}

// Pause is Sleep.
//
// Deprecated: use Sleep; one word per concept.
func (c *Client) Pause(ctx context.Context, id string) (*Sandbox, error) { return c.Sleep(ctx, id) }

// Resume is Wake.
//
// Deprecated: use Wake; one word per concept.
func (c *Client) Resume(ctx context.Context, id string) (*Sandbox, error) { return c.Wake(ctx, id) }

// Stopped says how many commands a stop cancelled.
type Stopped = wire.Stopped

// Stop cancels every command running in a sandbox; the sandbox stays.
func (c *Client) Stop(ctx context.Context, id string) (*Stopped, error) {
	var s Stopped
	return &s, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/stop", out: &s})
}

// Ended is the end of a sandbox.
type Ended = wire.Ended

// End ends a sandbox; purge drops its project volume too.
func (c *Client) End(ctx context.Context, id string, purge bool) (*Ended, error) {
	q := url.Values{}
	if purge {
		q.Set("purge", "1")
	}
	var e Ended
	return &e, c.do(ctx, request{method: "DELETE", path: "/v1/sandbox/" + esc(id), query: q, out: &e})
}

// ExecRequest is a command: Argv wins; else Command runs with sh -c.
type ExecRequest = wire.ExecRequest

// ExecResult is a finished command; a non-zero exit is a result, not an
// error.
type ExecResult = wire.ExecResult

// Exec runs a command and waits for it.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	var r ExecResult
	return &r, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/exec", in: req, out: &r})
}

// Written is a file write.
type Written = wire.Written

// WriteFile writes r as the whole file at path (under the workdir),
// streamed; parents are created.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader) (*Written, error) {
	if r == nil {
		r = strings.NewReader("")
	}
	var w Written
	return &w, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/fs", query: url.Values{"path": {path}},
		body: r, contentType: "application/octet-stream", out: &w})
}

// File is an open read: a file's bytes, or a directory's entries one per
// line (Dir). Close it.
type File struct {
	io.ReadCloser
	Path string // the resolved path in the sandbox
	Dir  bool
	Size int64
}

// ReadFile opens the file (or directory) at path for reading, streamed.
func (c *Client) ReadFile(ctx context.Context, id, path string) (*File, error) {
	res, err := c.send(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/fs", query: url.Values{"path": {path}}})
	if err != nil {
		return nil, err
	}
	return &File{ReadCloser: res.Body, Path: res.Header.Get("X-Sandbox-Path"), Dir: res.Header.Get("X-Sandbox-Kind") == "directory", Size: res.ContentLength}, nil
}

// ReadDir lists a directory: entries, directories ending in '/'.
func (c *Client) ReadDir(ctx context.Context, id, path string) ([]string, error) {
	f, err := c.ReadFile(ctx, id, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	if !f.Dir {
		return nil, &Error{Status: http.StatusBadRequest, Message: path + " is a file, not a directory"}
	}
	entries := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(entries) == 1 && entries[0] == "" {
		return []string{}, nil
	}
	return entries, nil
}

// ExecStream runs a command and copies its output to stdout and stderr as
// the program writes it (the server's NDJSON stream); the result carries
// the exit, not the output. Cancelling ctx ends the command.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (*ExecResult, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	res, err := c.send(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/exec", body: bytes.NewReader(payload),
		contentType: "application/json", accept: "application/x-ndjson"})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var line struct {
			Stdout, Stderr, StdoutBase64, StderrBase64 string
			ExitCode                                   *int
			TimedOut, Stopped, Woken                   bool
			Error                                      string
		}
		if err := dec.Decode(&line); err != nil {
			return nil, fmt.Errorf("client: the exec stream ended early: %w", err)
		}
		switch {
		case line.Error != "":
			return nil, &Error{Status: http.StatusBadGateway, Message: line.Error}
		case line.ExitCode != nil:
			return &ExecResult{ExitCode: *line.ExitCode, TimedOut: line.TimedOut, Stopped: line.Stopped, Woken: line.Woken}, nil
		}
		for _, part := range []struct {
			text, b64 string
			w         io.Writer
		}{{line.Stdout, line.StdoutBase64, stdout}, {line.Stderr, line.StderrBase64, stderr}} {
			b := []byte(part.text)
			if part.b64 != "" {
				if b, err = base64.StdEncoding.DecodeString(part.b64); err != nil {
					return nil, fmt.Errorf("client: the exec stream: %w", err)
				}
			}
			if len(b) > 0 && part.w != nil {
				if _, err := part.w.Write(b); err != nil {
					return nil, err
				}
			}
		}
	}
}

// Stats is a running sandbox's use now. CPUSeconds, MemoryBytes and
// Processes are nil where the backend cannot tell (Unavailable says so).
type Stats = wire.Stats

// Stats reads a running sandbox's use (409 for a sleeping one).
func (c *Client) Stats(ctx context.Context, id string) (*Stats, error) {
	var s Stats
	return &s, c.do(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/stats", out: &s})
}

// Archive opens a tar of the directory at path (gzipped when gz),
// streamed. Close it.
func (c *Client) Archive(ctx context.Context, id, path string, gz bool) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if gz {
		q.Set("gzip", "1")
	}
	res, err := c.send(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/fs/archive", query: q})
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// Extracted is an unpacked archive.
type Extracted = wire.Extracted

// Extract unpacks a tar or tar.gz from r under the directory path (made if
// missing), streamed. An entry that would leave it refuses the whole
// archive, and nothing is written.
func (c *Client) Extract(ctx context.Context, id, path string, r io.Reader) (*Extracted, error) {
	var x Extracted
	return &x, c.do(ctx, request{method: "POST", path: "/v1/sandbox/" + esc(id) + "/fs/archive", query: url.Values{"path": {path}},
		body: r, contentType: "application/x-tar", out: &x})
}

// NetworkPolicy is an egress policy: what a sandbox may reach.
type NetworkPolicy = wire.NetworkPolicy

// SetNetwork replaces the egress policy of sandbox id (an empty one closes
// it): new connections follow it at once, and the open ones it refuses are
// cut. A sandbox leased with no network has no way out to open (409); a
// policy the backend cannot hold is 501.
func (c *Client) SetNetwork(ctx context.Context, id string, p NetworkPolicy) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "PUT", path: "/v1/sandbox/" + esc(id) + "/network", in: p, out: &sb})
}
