package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
)

// TestPreviewLink: the client mints a link whose URLs name the preview in
// both forms, bounded by the lease, and which the server admits (its
// first visit is the redirect that drops the token).
func TestPreviewLink(t *testing.T) {
	c, s := newClient(t)
	ctx := context.Background()
	sb, err := c.Lease(ctx, client.LeaseRequest{TTLSec: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer c.End(ctx, sb.ID, false)
	l, err := c.PreviewLink(ctx, sb.ID, 8000, 3600)
	if err != nil {
		t.Fatal(err)
	}
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	if l.ID != sb.ID || l.Port != 8000 || !strings.HasPrefix(l.URL, "http://8000-"+sb.ID+".localhost:"+port+"/?preview_token=spv1.") ||
		!strings.HasPrefix(l.PathURL, s.URL+"/v1/sandbox/"+sb.ID+"/ports/8000/?preview_token=spv1.") {
		t.Errorf("link: %+v", l)
	}
	if l.ExpiresAt > time.Now().Add(121*time.Second).Unix() {
		t.Errorf("the link outlives the lease: %d", l.ExpiresAt)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Get(l.PathURL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || strings.Contains(res.Header.Get("Location"), "preview_token") || len(res.Cookies()) != 1 {
		t.Errorf("the link's first visit: %d %q %v", res.StatusCode, res.Header.Get("Location"), res.Header["Set-Cookie"])
	}
	if _, err := c.PreviewLink(ctx, "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa", 8000, 0); !client.IsNotFound(err) {
		t.Errorf("a link to an unknown sandbox: %v", err)
	}
}
