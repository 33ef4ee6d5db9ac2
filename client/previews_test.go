package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestPreviewLink: the client mints a link whose URLs name the preview in
// both forms (the token in the host form's only), bounded by the lease;
// a browser on the path form is sent to the host form.
func TestPreviewLink(t *testing.T) {
	backends(t, func(t *testing.T, c *client.Client, s *testenv.Server, backend string) {
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
		if l.ID != sb.ID || l.Port != 8000 || !strings.HasPrefix(l.URL, "http://8000-"+strings.Replace(sb.ID, "_", "-", 1)+".localhost:"+port+"/?preview_token=spv2.") ||
			l.PathURL != s.URL+"/v1/sandbox/"+sb.ID+"/ports/8000/" {
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
		if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != "http://8000-"+strings.Replace(sb.ID, "_", "-", 1)+".localhost:"+port+"/" || len(res.Cookies()) != 0 {
			t.Errorf("the path form without a key: %d %q %v", res.StatusCode, res.Header.Get("Location"), res.Header["Set-Cookie"])
		}
		if _, err := c.PreviewLink(ctx, "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa", 8000, 0); !client.IsNotFound(err) {
			t.Errorf("a link to an unknown sandbox: %v", err)
		}
	})
}

// TestSetNetwork: the client asks for a network and changes it. These
// servers allow none (--network-allow), and a sandbox leased without one
// cannot be opened: the server's answers, in its words, are what the
// client sent. (The policies' enforcement: test/integration, and the SDK
// suites, whose server has a network.)
func TestSetNetwork(t *testing.T) {
	backends(t, func(t *testing.T, c *client.Client, s *testenv.Server, backend string) {
		ctx := context.Background()
		_, err := c.Lease(ctx, client.LeaseRequest{Network: &client.NetworkPolicy{Allow: []string{"pypi.org"}}})
		if client.StatusOf(err) != http.StatusForbidden || !strings.Contains(err.Error(), "pypi.org") {
			t.Errorf("a lease with a network the server does not allow: %v", err)
		}
		sb, err := c.Lease(ctx, client.LeaseRequest{TTLSec: 120})
		if err != nil {
			t.Fatal(err)
		}
		defer c.End(ctx, sb.ID, false)
		// Closing it: the gVisor backend gave it no interface (409: it
		// cannot be opened), the kube backend can (its NetworkPolicy is
		// the deny-all's, then its own).
		got, err := c.SetNetwork(ctx, sb.ID, client.NetworkPolicy{})
		if err == nil && !got.Network.None() || err != nil && client.StatusOf(err) != http.StatusConflict {
			t.Errorf("closing a sandbox leased with no network: %+v %v", got, err)
		}
		if _, err := c.SetNetwork(ctx, "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa", client.NetworkPolicy{}); !client.IsNotFound(err) {
			t.Errorf("an unknown sandbox: %v", err)
		}
	})
}
