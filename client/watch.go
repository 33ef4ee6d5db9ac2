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
// server ends the stream. A stream that breaks (the connection, not the
// server, ends it) is resumed after the last
// event fn had (the server keeps a watch 30 s for it): the changes made
// meanwhile come first, or an overflow event where some were lost; ready
// comes once.
func (c *Client) WatchDir(ctx context.Context, id, path string, recursive bool, fn func(FileEvent) error) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	ready := false
	return resume(ctx, "", "the watch of "+path, func(last string) (string, bool, error) {
		at, err := c.watchOnce(ctx, id, q, last, func(ev FileEvent) error {
			if ev.Type == "ready" {
				if ready {
					return nil // a resumed stream's
				}
				ready = true
			}
			return fn(ev)
		})
		// The server ends a watch's stream only when the watch ends; a
		// broken one ends in an error.
		return at, err == nil && ctx.Err() == nil, err
	})
}

// watchOnce reads one connection of a watch, resumed after event last when
// it is set; it returns the id of the last event it read (last when none).
func (c *Client) watchOnce(ctx context.Context, id string, q url.Values, last string, fn func(FileEvent) error) (string, error) {
	res, err := c.send(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/fs/watch", query: q, accept: "text/event-stream", lastEventID: last})
	if err != nil {
		return last, err
	}
	defer res.Body.Close()
	at := last
	err = readSSE(res.Body, 1<<20, func(e sseEvent) error {
		var ev FileEvent
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			return fmt.Errorf("client: a file event: %w", err)
		}
		if err := fn(ev); err != nil {
			return handlerError{err}
		}
		at = e.id
		return nil
	})
	return at, err
}
