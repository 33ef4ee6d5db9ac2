package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// browser starts a real headless Chromium (Debian's chromium package),
// with the extra options (flags) a test needs.
func browser(t testing.TB, extra ...chromedp.ExecAllocatorOption) (context.Context, context.CancelFunc) {
	t.Helper()
	path := testenv.NeedBrowser(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 800),
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// The first Run starts the browser; it lives as long as ctx.
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx, func() { cancelCtx(); cancelAlloc() }
}

// waitPage waits until expr is true in the page, asking again every 100 ms
// for up to timeout. An evaluation that fails is asked again too: while a
// page loads, its execution context can be replaced under a poll ("Cannot
// find context with specified id"), which says nothing about the page. The
// last answer or error is reported at the timeout.
func waitPage(ctx context.Context, expr string, timeout time.Duration) error {
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s is still false", expr)
		}
		if ctx.Err() != nil {
			return err
		}
		last = err
	}
	return fmt.Errorf("after %s: %w", timeout, last)
}

// typeText inserts text at the focus the way typing it does (one input
// event per text; synthesized key events would reach xterm twice: as the
// key and as the char).
func typeText(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: text})
		return err
	})
}

// TestTerminalInBrowser: Chromium loads the terminal page from a ticket's
// url, a command typed into xterm runs in the sandbox and its output shows
// in the DOM; framed by a page of another (allowed) origin, the page posts
// {source: "sandbox-term", ready: true} to its parent once live.
func TestTerminalInBrowser(t *testing.T) {
	t.Parallel() // see parallel_test.go
	var parentBody string
	parent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, parentBody)
	}))
	defer parent.Close()
	e := newEnvConfig(t, server.Config{API: api.Config{FrameAncestors: "'self' " + parent.URL}})
	id := e.lease("acme", map[string]any{"ttlSec": 300})
	ctx, cancel := browser(t)
	defer cancel()

	// Top level: type a command, read its output from the page.
	_, tk := e.ticketFor("acme", id, "terminal")
	err := chromedp.Do(ctx, chromedp.Navigate(e.http.URL+tk["url"].(string)))
	if err == nil {
		err = waitPage(ctx, `document.getElementById("status").textContent.startsWith("connected")`, 30*time.Second)
	}
	if err == nil {
		err = chromedp.Do(ctx,
			chromedp.Focus(chromedp.CSS(".xterm-helper-textarea")),
			typeText("echo browser-$((6*7)) $(cat /etc/hostname)"),
			chromedp.KeyEvent(kb.Enter),
		)
	}
	if err == nil {
		err = waitPage(ctx, `document.querySelector(".xterm-rows").textContent.includes("browser-42 sandbox")`, 30*time.Second)
	}
	if err != nil {
		rows, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("terminal page: %v (page text: %q)", err, rows)
	}

	// Framed by another origin: the ready message reaches the parent.
	_, tk = e.ticketFor("acme", id, "terminal")
	parentBody = `<!doctype html><script>window.msgs = []; addEventListener("message", e => window.msgs.push(e.data));</script>
<iframe src="` + e.http.URL + tk["url"].(string) + `" width="800" height="500"></iframe>`
	err = chromedp.Do(ctx, chromedp.Navigate(parent.URL))
	if err == nil {
		err = waitPage(ctx, `window.msgs.some(m => m && m.source === "sandbox-term" && m.ready === true)`, 30*time.Second)
	}
	got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.msgs)`))
	if err != nil {
		t.Fatalf("framed page: %v (messages %s)", err, got)
	}
	if !strings.Contains(got, `"ready":true`) {
		t.Errorf("parent got %s", got)
	}
}
