package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxd/sandbox/wire"
)

// Code contexts: Jupyter kernels in a sandbox that keep their state
// between runs.
type (
	ContextRequest    = wire.ContextRequest
	CodeContext       = wire.CodeContext
	ContextRunRequest = wire.ContextRunRequest
	Execution         = wire.Execution
	ContextEvent      = wire.ContextEvent
	Result            = wire.Result
	ExecutionError    = wire.ExecutionError
)

func contextsPath(id string) string { return "/v1/sandbox/" + esc(id) + "/contexts" }

// CreateContext opens a code context (language python, r, javascript or bash); its kernel
// is ready when this returns.
func (c *Client) CreateContext(ctx context.Context, id string, req ContextRequest) (*CodeContext, error) {
	var k CodeContext
	return &k, c.do(ctx, request{method: "POST", path: contextsPath(id), in: req, out: &k})
}

// Contexts lists a sandbox's code contexts, oldest first.
func (c *Client) Contexts(ctx context.Context, id string) ([]CodeContext, error) {
	var b wire.ContextsBody
	return b.Contexts, c.do(ctx, request{method: "GET", path: contextsPath(id), out: &b})
}

// DeleteContext ends a code context and its kernel.
func (c *Client) DeleteContext(ctx context.Context, id, ctxID string) (*CodeContext, error) {
	var k CodeContext
	return &k, c.do(ctx, request{method: "DELETE", path: contextsPath(id) + "/" + esc(ctxID), out: &k})
}

// InterruptContext interrupts the context's run; its state stays.
func (c *Client) InterruptContext(ctx context.Context, id, ctxID string) (*CodeContext, error) {
	var k CodeContext
	return &k, c.do(ctx, request{method: "POST", path: contextsPath(id) + "/" + esc(ctxID) + "/interrupt", out: &k})
}

// RunInContext runs code in a context (a language's name is its default
// context, opened on first use) and answers the whole execution.
func (c *Client) RunInContext(ctx context.Context, id, ctxID string, req ContextRunRequest) (*Execution, error) {
	var ex Execution
	return &ex, c.do(ctx, request{method: "POST", path: contextsPath(id) + "/" + esc(ctxID) + "/run", in: req, out: &ex})
}

// RunInContextStream runs code in a context and calls fn with each event as it
// comes, the last one of type "end". An error event without an end after
// it is the server's failure mid-run.
func (c *Client) RunInContextStream(ctx context.Context, id, ctxID string, req ContextRunRequest, fn func(ContextEvent) error) error {
	res, err := c.send(ctx, request{method: "POST", path: contextsPath(id) + "/" + esc(ctxID) + "/run", in: req, accept: "application/x-ndjson"})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	ended := false
	for sc.Scan() {
		var e ContextEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("client: a run's event: %w", err)
		}
		if e.Type == "end" {
			ended = true
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !ended {
		return fmt.Errorf("client: the run's stream ended before its end")
	}
	return nil
}
