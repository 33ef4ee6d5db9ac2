package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/sandboxd/sandbox/wire"
	"io"
	"mime/multipart"
	"net/url"
	"strconv"
	"strings"
)

// RunCodeRequest is a program for the code interpreter.
type RunCodeRequest = wire.RunCodeRequest

// InputFile is placed in the workdir before a run: text in Data, or bytes
// in DataBase64.
type InputFile = wire.InputFile

// RunCodeResult is a finished run; Files are what this run created or
// changed.
type RunCodeResult = wire.RunCodeResult

// RunFile is a file of the interpreter's working directory in its sandbox.
type RunFile = wire.RunFile

// SessionFile is the old name of RunFile.
//
// Deprecated: use RunFile.
type SessionFile = RunFile

// RunCode runs a program in the code interpreter.
func (c *Client) RunCode(ctx context.Context, req RunCodeRequest) (*RunCodeResult, error) {
	var r RunCodeResult
	return &r, c.do(ctx, request{method: "POST", path: "/v1/exec", in: req, out: &r})
}

// RunFiles lists the files of the interpreter's working directory in
// sandbox (a RunCodeResult's SandboxID).
func (c *Client) RunFiles(ctx context.Context, sandbox string) ([]RunFile, error) {
	var b struct {
		Files []RunFile `json:"files"`
	}
	return b.Files, c.do(ctx, request{method: "GET", path: "/v1/exec/" + esc(sandbox) + "/files", out: &b})
}

// SessionFiles is the old name of RunFiles.
//
// Deprecated: use RunFiles.
func (c *Client) SessionFiles(ctx context.Context, sandbox string) ([]RunFile, error) {
	return c.RunFiles(ctx, sandbox)
}

// Upload writes files (name → content) into the interpreter's working
// directory in sandbox, in one multipart body, streamed.
func (c *Client) Upload(ctx context.Context, sandbox string, files map[string]io.Reader) ([]RunFile, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for name, r := range files {
			w, err := mw.CreateFormFile("file", name)
			if err == nil {
				_, err = io.Copy(w, r)
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	var b struct {
		Files []RunFile `json:"files"`
	}
	err := c.do(ctx, request{method: "POST", path: "/v1/exec/" + esc(sandbox) + "/files", body: pr, contentType: mw.FormDataContentType(), out: &b})
	pr.CloseWithError(io.ErrClosedPipe)
	return b.Files, err
}

// Download opens one of the interpreter's files in sandbox. Close it.
func (c *Client) Download(ctx context.Context, sandbox, path string) (io.ReadCloser, error) {
	res, err := c.send(ctx, request{method: "GET", path: "/v1/exec/" + esc(sandbox) + "/files/" + strings.TrimPrefix(path, "/")})
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// Event is one entry of a session's live log.
type Event = wire.Event

// Follow streams a session's log after event seq after (0: from the
// start): the backlog, then each event as it comes, until ctx ends or the
// server drops the stream (a slow follower is dropped; follow again from
// the last Seq). Each event goes to fn; an error from fn ends the stream.
func (c *Client) Follow(ctx context.Context, session string, after int64, fn func(Event) error) error {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	res, err := c.send(ctx, request{method: "GET", path: "/v1/sessions/" + esc(session) + "/events", query: q})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("client: an event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sc.Err()
}

// Quota is one quota of the org with its use.
type Quota = wire.Quota

// Quotas lists the org's quotas with their use.
func (c *Client) Quotas(ctx context.Context) ([]Quota, error) {
	var b struct {
		Quotas []Quota `json:"quotas"`
	}
	return b.Quotas, c.do(ctx, request{method: "GET", path: "/v1/sandbox/quota", out: &b})
}

// Volume is a project volume of the org.
type Volume = wire.Volume

// Volumes lists the org's project volumes.
func (c *Client) Volumes(ctx context.Context) ([]Volume, error) {
	var b struct {
		Volumes []Volume `json:"volumes"`
	}
	return b.Volumes, c.do(ctx, request{method: "GET", path: "/v1/volumes", out: &b})
}

// DeleteVolume deletes a project's volume (refused, 409, while a live
// sandbox holds it).
func (c *Client) DeleteVolume(ctx context.Context, project string) error {
	return c.do(ctx, request{method: "DELETE", path: "/v1/volumes/" + esc(project)})
}

// Info is what a server is and what its backend can do beyond the core.
type Info = wire.Info

// Info asks the server what it is and can do.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	var i Info
	return &i, c.do(ctx, request{method: "GET", path: "/v1/info", out: &i})
}
