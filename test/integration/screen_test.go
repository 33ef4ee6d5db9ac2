package integration_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
)

// TestScreen: a desktop sandbox's screen socket relays the VNC server's
// RFB bytes untranslated (the handshake arrives intact), and Chromium,
// loading the screen page, connects and shows non-black pixels from the
// desktop.
func TestScreen(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnv(t, "desktop")
	id := e.lease("acme", map[string]any{"class": "desktop", "project": "desk", "ttlSec": 300})

	tk, ws, _ := e.dialScreen(t, id)
	ws.Close(websocket.StatusNormalClosure, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A spent ticket, and a terminal ticket, do not open the screen.
	if _, res, err := websocket.Dial(ctx, e.wsURL(id, "screen", tk, ""), nil); err == nil || dialStatus(res) != http.StatusUnauthorized {
		t.Errorf("spent screen ticket: %v %d", err, dialStatus(res))
	}
	term, _ := e.ticketFor("acme", id, "terminal")
	if _, res, err := websocket.Dial(ctx, e.wsURL(id, "screen", term, ""), nil); err == nil || dialStatus(res) != http.StatusUnauthorized {
		t.Errorf("terminal ticket on the screen: %v %d", err, dialStatus(res))
	}

	bctx, bcancel := browser(t)
	defer bcancel()
	_, page := e.ticketFor("acme", id, "screen")
	err := chromedp.Do(bctx, chromedp.Navigate(e.http.URL+page["url"].(string)))
	if err == nil {
		err = waitPage(bctx, `document.getElementById("status").textContent === "connected"`, 30*time.Second)
	}
	if err != nil {
		text, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("screen page: %v (page: %q)", err, text)
	}
	// The desktop draws its first window within seconds of the display's
	// start; look until it shows.
	lit := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		shot, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.CSS("#screen canvas")))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatal(err)
		}
		if lit = litPixels(img); lit >= 1000 {
			return
		}
	}
	t.Errorf("the screen stayed black: %d lit pixels", lit)
}

// dialScreen opens the screen socket of id with a fresh ticket (answered,
// now spent) and reads the first frame, which must be the VNC server's RFB
// version, intact.
func (e *env) dialScreen(t *testing.T, id string) (string, *websocket.Conn, []byte) {
	t.Helper()
	tk, _ := e.ticketFor("acme", id, "screen")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.wsURL(id, "screen", tk, ""), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	typ, b, err := ws.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || !bytes.HasPrefix(b, []byte("RFB 003.")) {
		// What the display was doing says why (a CI run once waited
		// out the minute with no word).
		a := e.exec("acme", id, map[string]any{"command": "ps -eo pid,etime,stat,args; tail -n 5 /tmp/.xvfb.log /tmp/.x11vnc.log", "timeoutSec": 10})
		t.Fatalf("first frame: %v %v %q\nthe sandbox's processes and display logs:\n%s%s\nthe server's screen goroutines:\n%s", typ, err, b, a.Stdout, a.Stderr, stacksOf("screenSocket", "execChannel"))
	}
	return tk, ws, b
}

// litPixels counts pixels brighter than near-black.
func litPixels(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r+g+bl > 3*0x2000 {
				n++
			}
		}
	}
	return n
}

// stacksOf is this process's goroutines whose stacks name any of funcs
// (the server runs in the test's process): where a stuck call waits.
func stacksOf(funcs ...string) string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range funcs {
			if strings.Contains(g, f) {
				out = append(out, g)
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}
