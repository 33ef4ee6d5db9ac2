package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

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
	const tries = 5
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	last, failed, ready := "", 0, false
	for {
		at, err := c.watchOnce(ctx, id, q, last, func(ev FileEvent) error {
			if ev.Type == "ready" {
				if ready {
					return nil // a resumed stream's
				}
				ready = true
			}
			return fn(ev)
		})
		var h handlerError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &h):
			return h.err
		case StatusOf(err) != 0:
			return err // the server refused: trying again would not help
		case err == nil:
			return nil // the server ended the stream (a broken one ends in an error): the watch ended
		}
		if at != "" && at != last {
			last, failed = at, 0
		} else if failed++; failed >= tries {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("client: the watch of %s broke %d times in a row: %w", path, tries, err)
		}
		select {
		case <-time.After(time.Duration(100<<failed) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchOnce reads one connection of a watch, resumed after event last when
// it is set; it returns the id of the last event it read ("" when none).
func (c *Client) watchOnce(ctx context.Context, id string, q url.Values, last string, fn func(FileEvent) error) (string, error) {
	res, err := c.send(ctx, request{method: "GET", path: "/v1/sandbox/" + esc(id) + "/fs/watch", query: q, accept: "text/event-stream", lastEventID: last})
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	at := ""
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
