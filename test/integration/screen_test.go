package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"runtime"
	"slices"
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
	e.screenWithoutProcess(t, id)
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
func (e *env) dialScreen(t testing.TB, id string) (string, *websocket.Conn, []byte) {
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

// screenWithoutProcess opens another screen connection of id, whose
// display runs already: it must come through the server's port path, with
// no relay process (the display script's socat) inside for it, on either
// backend. The first connection's socat may take a moment to go.
func (e *env) screenWithoutProcess(t *testing.T, id string) {
	t.Helper()
	_, ws, _ := e.dialScreen(t, id)
	defer ws.CloseNow()
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out = strings.TrimSpace(e.exec("acme", id, map[string]any{"command": "pgrep -a -x socat || echo none", "timeoutSec": 10}).Stdout)
		if out == "none" || time.Now().After(deadline) {
			break
		}
	}
	if out != "none" {
		t.Errorf("a screen connection to a running display has a relay process inside: %q", out)
	}
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

// BenchmarkScreenFirstFrame: a new screen connection of a desktop whose
// display runs — a ticket, the socket's upgrade, the connection through
// the port path (no process inside) and its first frame, the VNC server's
// RFB version — beside its floor, measured
// in the same sandbox: a connection to the VNC server from inside,
// answered with the same 12 bytes (python3's socket, 30 in a row).
func BenchmarkScreenFirstFrame(b *testing.B) {
	e := newEnv(b, "desktop")
	id := e.lease("acme", map[string]any{"class": "desktop", "project": "bench-screen", "ttlSec": 600})
	_, ws, _ := e.dialScreen(b, id) // starts the display, untimed
	ws.Close(websocket.StatusNormalClosure, "")
	measure(b, nil, func() func() {
		_, ws, _ := e.dialScreen(b, id)
		return func() { ws.Close(websocket.StatusNormalClosure, "") }
	})
	a := e.exec("acme", id, map[string]any{"argv": []string{"python3", "-c", screenFloor}, "timeoutSec": 120})
	var ms []float64
	for _, f := range strings.Fields(a.Stdout) {
		var v float64
		if _, err := fmt.Sscan(f, &v); err != nil {
			b.Fatalf("the floor's output: %q %q", a.Stdout, a.Stderr)
		}
		ms = append(ms, v)
	}
	if len(ms) == 0 {
		b.Fatalf("the floor measured nothing: %q", a.Stderr)
	}
	slices.Sort(ms)
	b.ReportMetric(ms[len(ms)/2], "floor-inside-p50-ms")
}

// screenFloor connects to the VNC server 30 times and prints, per
// connection, the milliseconds to its 12-byte protocol version.
const screenFloor = `import socket, time
for _ in range(30):
    t = time.monotonic()
    s = socket.create_connection(("127.0.0.1", 5900))
    b = b""
    while len(b) < 12:
        b += s.recv(12 - len(b))
    print((time.monotonic() - t) * 1000)
    s.close()
    time.sleep(0.05)
`
