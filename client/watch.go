package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

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
	var data []string
	kind := ""
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 16<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				kind = value
			case "data":
				data = append(data, value)
			}
			continue
		}
		k, d := kind, strings.Join(data, "\n")
		kind, data = "", nil
		if k == "" {
			continue // a comment (: ping) or the retry hint
		}
		var ev FileEvent
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			return fmt.Errorf("client: a file event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sc.Err()
}
