package service

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// Get returns one sandbox of the caller's org.
func (s *Service) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	if !sandbox.ValidID(id) {
		return nil, sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")
	}
	return s.d.Store.Get(ctx, id)
}

// ListRequest selects a page of the caller's sandboxes.
type ListRequest struct {
	Project string
	Status  string
	Limit   int    // 1..MaxPage; 0 means MaxPage
	Cursor  string // the Next of the previous page
	// Metadata keeps the sandboxes whose metadata has each key with its value.
	Metadata map[string]string
}

// MaxPage bounds one page of a listing.
const MaxPage = 1000

// List returns a page of the caller's sandboxes, newest first, and the
// cursor of the next page ("" on the last).
func (s *Service) List(ctx context.Context, req ListRequest) ([]*sandbox.Sandbox, string, error) {
	st := sandbox.Status(req.Status)
	if req.Status != "" && !st.Known() {
		return nil, "", sandbox.Errorf(sandbox.KindInvalid, "unknown status %q: use pending, running, sleeping or error", req.Status)
	}
	if req.Limit < 0 || req.Limit > MaxPage {
		return nil, "", sandbox.Errorf(sandbox.KindInvalid, "limit must be 1-%d", MaxPage)
	}
	if req.Limit == 0 {
		req.Limit = MaxPage
	}
	if err := sandbox.CheckMetadata(req.Metadata); err != nil {
		return nil, "", err
	}
	f := store.Filter{Project: req.Project, Status: st, Limit: req.Limit + 1, Metadata: req.Metadata}
	if req.Cursor != "" {
		pos, err := ParseCursor(req.Cursor)
		if err != nil {
			return nil, "", err
		}
		f.After = &pos
	}
	list, err := s.d.Store.List(ctx, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > req.Limit {
		list = list[:req.Limit]
		last := list[len(list)-1]
		next = Cursor(store.Position{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return list, next, nil
}

// Cursor encodes a list position for a client to send back.
func Cursor(p store.Position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.CreatedAt.UnixMilli(), 10) + "." + p.ID))
}

// ParseCursor reads a cursor from a client: untrusted, and refused (400)
// unless it is exactly what Cursor makes.
func ParseCursor(c string) (store.Position, error) {
	bad := sandbox.Errorf(sandbox.KindInvalid, "cursor is not one this server gave out: pass the \"next\" of the previous page")
	if len(c) > 128 {
		return store.Position{}, bad
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return store.Position{}, bad
	}
	ms, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 || !sandbox.ValidID(id) || strconv.FormatInt(n, 10) != ms {
		return store.Position{}, bad
	}
	return store.Position{CreatedAt: time.UnixMilli(n).UTC(), ID: id}, nil
}
