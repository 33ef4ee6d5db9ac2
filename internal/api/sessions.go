package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/keywatch"
	"github.com/sandboxd/sandbox/internal/narrate"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// Sessions is the part of the session logs the API reads.
type Sessions interface {
	Follow(ctx context.Context, session string, after int64) ([]narrate.Event, *narrate.Follower, error)
	Backlog(ctx context.Context, session string, after int64, limit int) ([]narrate.Event, error)
}

// heartbeat keeps idle event streams (and proxies in between) alive.
const heartbeat = 15 * time.Second

type eventBody = wire.Event

// sessionEvents follows a session's log as server-sent events: the backlog
// first (after Last-Event-ID or ?after= when given), then each event as it
// is appended. A follower that falls behind is disconnected and resumes
// from its last id, as EventSource clients do by themselves.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := sandbox.CheckSessionName("session", name); err != nil {
		return err
	}
	if s.Sessions == nil {
		return sandbox.Errorf(sandbox.KindNotFound, "session logs are not kept by this server")
	}
	after := int64(0)
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("after")
	}
	if last != "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return sandbox.Errorf(sandbox.KindInvalid, "the last event id must be a sequence number from this stream")
		}
		after = n
	}
	// A follower holds one of its org's command slots while it follows,
	// and ends when its key is revoked.
	ctx, stopWatch := keywatch.Watch(r.Context(), s.Keys)
	defer stopWatch()
	release, err := s.Quotas.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	backlog, f, err := s.Sessions.Follow(ctx, name, after)
	if err != nil {
		return err
	}
	defer f.Close()

	rc := http.NewResponseController(w)
	startSSE(w)
	var buf bytes.Buffer
	buf.WriteString("retry: 1000\n\n")
	send := func(e narrate.Event) {
		if e.Seq <= after {
			return // already sent from the backlog
		}
		after = e.Seq
		b, _ := json.Marshal(eventBody{Seq: e.Seq, Kind: e.Kind, Text: strings.ToValidUTF8(string(e.Data), "\uFFFD"), At: e.At})
		fmt.Fprintf(&buf, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, b)
	}
	flush := func() error {
		rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		buf.Reset()
		return rc.Flush()
	}
	// The backlog goes out a page at a time (narrate.BacklogPage events
	// read from the store), in slices: neither the buffer nor the page
	// ever holds more than a page's worth.
	for {
		for i, e := range backlog {
			send(e)
			if i%64 == 63 {
				if err := flush(); err != nil {
					return nil
				}
			}
		}
		if err := flush(); err != nil {
			return nil
		}
		if len(backlog) < narrate.BacklogPage {
			break
		}
		if backlog, err = s.Sessions.Backlog(ctx, name, after, narrate.BacklogPage); err != nil {
			return nil // the stream has started: the client reconnects from its last id
		}
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-f.C():
			if !ok {
				return nil // fell behind: the client reconnects from its last id
			}
			send(e)
			// Drain what is already waiting into the same write.
			for more := true; more; {
				select {
				case e, ok := <-f.C():
					if !ok {
						flush()
						return nil
					}
					send(e)
				default:
					more = false
				}
			}
		case <-tick.C:
			buf.WriteString(": keep-alive\n\n")
		}
		if err := flush(); err != nil {
			return nil
		}
	}
}
