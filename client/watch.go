package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/sandboxd/sandbox/wire"
)

// FileEvent is one change under a watched directory: Type created,
// written, removed, renamed, or overflow (changes were missed); Name the
// path under the directory. The first event is "ready" (Name: the
// directory as the sandbox sees it): the watch is in place.
type FileEvent = wire.FileEvent

// WatchDir calls fn with each change under directory path of sandbox id
// (its subdirectories too with recursive) until ctx ends, fn fails or the
// server ends the stream. Nothing is replayed: a change made while no
// watch is open is not seen.
func (c *Client) WatchDir(ctx context.Context, id, path string, recursive bool, fn func(FileEvent) error) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	res, err := c.send(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/fs/watch", query: q, accept: "text/event-stream"})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	err = readSSE(res.Body, 1<<20, func(e sseEvent) error {
		var ev FileEvent
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			return fmt.Errorf("client: a file event: %w", err)
		}
		return fn(ev)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
