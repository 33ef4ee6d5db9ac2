package integration_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox/internal/server"
)

// echoServer answers every GET with the request line and headers it got.
const echoServer = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.requestline + "\n" + "".join(k + ": " + v + "\n" for k, v in self.headers.items())).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 8001), H).serve_forever()
`

// TestPortPreview: an HTTP server on the sandbox's own loopback
// answers through /v1/sandbox/{id}/ports/{port}/…, relayed over the exec
// channel; the caller's key does not reach it; nothing listening is a 502;
// another org's sandbox is a 404.
func TestPortPreview(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.sh("acme", id, "echo 'hello from inside' > hello.txt")
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", echoServer}})
		get := func(org, path string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest("GET", e.http.URL+"/v1/sandbox/"+id+"/ports/"+path, nil)
			req.Header.Set("Authorization", "Bearer "+e.keys[org])
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		var code int
		var body string
		for range 50 { // the servers take a moment to listen
			if code, body = get("acme", "8000/hello.txt"); code == 200 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code != 200 || body != "hello from inside\n" {
			t.Fatalf("through the preview: %d %q", code, body)
		}
		for range 50 {
			if code, body = get("acme", "8001/some/path?q=1"); code == 200 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code != 200 || !strings.HasPrefix(body, "GET /some/path?q=1 HTTP/1.1\n") || !strings.Contains(body, "X-Forwarded-For: 127.0.0.1") {
			t.Errorf("the request as the app saw it: %d %q", code, body)
		}
		if strings.Contains(strings.ToLower(body), "authorization") || strings.Contains(body, e.keys["acme"]) {
			t.Errorf("the caller's key reached the sandbox: %q", body)
		}
		if code, body = get("acme", "8002/"); code != http.StatusBadGateway || !strings.Contains(body, "nothing listens on port 8002") {
			t.Errorf("a port with no listener: %d %q", code, body)
		}
		if code, _ = get("globex", "8000/hello.txt"); code != http.StatusNotFound {
			t.Errorf("another org's preview: %d", code)
		}
		if code, _ = get("acme", "0/"); code != http.StatusBadRequest {
			t.Errorf("port 0: %d", code)
		}
		// The path the connections took: on gVisor runsc's own port
		// forward, no stream of the relay; on the cluster the relay.
		m := string(e.must(http.StatusOK, "GET", "/metrics", "system", nil).Body)
		forward := strings.Contains(m, `sandbox_port_connections_total{path="forward"}`)
		relayed := strings.Contains(m, `sandbox_port_connections_total{path="relay"}`)
		if backend, _ := e.capabilities(); backend == "gvisor" && (!forward || relayed) || backend != "gvisor" && (forward || !relayed) {
			t.Errorf("on %s the connections went forward=%v relay=%v:\n%s", backend, forward, relayed, grepLines(m, "sandbox_port_connections_total"))
		}
	})
}

// wsEcho is a WebSocket echo server from Python's standard library alone:
// the handshake, then each (masked, short) text frame sent back.
const wsEcho = `import base64, hashlib, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8003)); s.listen(8)
while True:
    c, _ = s.accept()
    req = b""
    while b"\r\n\r\n" not in req:
        req += c.recv(4096)
    key = [l.split(b": ", 1)[1] for l in req.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    while True:
        h = c.recv(2)
        if len(h) < 2 or h[0] & 0x0f == 8:
            break
        n = h[1] & 0x7f
        mask = c.recv(4)
        data = bytearray(c.recv(n))
        for i in range(len(data)):
            data[i] ^= mask[i % 4]
        c.sendall(bytes([0x81, len(data)]) + bytes(data))
    c.close()
`

// TestPortPreviewWebSocket: a WebSocket upgrade passes through a
// preview, and messages go both ways (a dev server's live reload).
func TestPortPreviewWebSocket(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", wsEcho}})
		url := "ws" + strings.TrimPrefix(e.http.URL, "http") + "/v1/sandbox/" + id + "/ports/8003/live"
		var c *websocket.Conn
		var err error
		for range 50 {
			c, _, err = websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + e.keys["acme"]}}})
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("dialing the preview's WebSocket: %v", err)
		}
		defer c.CloseNow()
		for _, msg := range []string{"reload?", "again"} {
			if err := c.Write(t.Context(), websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.Read(t.Context())
			if err != nil || string(got) != msg {
				t.Fatalf("echo of %q: %q %v", msg, got, err)
			}
		}
	})
}

// stalledApp listens on 8009 with an accept queue of one place and never
// accepts: an app that stopped answering.
const stalledApp = `import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 8009)); s.listen(0)
open("/tmp/listening", "w")
time.sleep(600)
`

// TestPreviewFallsBackToRelay: a preview of an app that stopped accepting
// answers an error within a bound, and another port of the same sandbox
// still answers, through the relay (path="relay"); the runtime's list of
// every sandbox does not wait for the stalled one. On gVisor a preview
// goes through runsc's port forward first, and a forward that stalls (an
// app whose accept queue is full holds the sentry's connect, and its
// control server, for TCP's retries) is given up after 3 s, the sandbox's
// previews going through its relay from then on; on a cluster every
// preview is a stream of the relay, whose dial is bounded.
func TestPreviewFallsBackToRelay(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.sh("acme", id, "echo 'via the relay' > hello.txt")
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}})
		e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", stalledApp}})
		e.sh("acme", id, "while [ ! -e /tmp/listening ]; do sleep 0.05; done")
		get := func(ctx context.Context, path string) (int, string, error) {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/sandbox/"+id+"/ports/"+path, nil)
			req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, "", err
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b), nil
		}
		ctx := t.Context()
		for i := 0; ; i++ { // the server takes a moment to listen
			code, body, err := get(ctx, "8000/hello.txt")
			if err == nil && code == 200 && body == "via the relay\n" {
				break
			}
			if i == 50 {
				t.Fatalf("through the forward: %d %q %v", code, body, err)
			}
			time.Sleep(100 * time.Millisecond)
		}

		// The first connection takes the queue's one place; its request hangs.
		hung, cancel := context.WithCancel(ctx)
		defer cancel()
		go get(hung, "8009/")
		time.Sleep(time.Second)
		t0 := time.Now()
		code, body, err := get(ctx, "8009/")
		if err != nil || code < 500 || time.Since(t0) > 30*time.Second {
			t.Errorf("a preview of the stalled app: %d %q %v after %v", code, body, err, time.Since(t0))
		}
		if code, body, err := get(ctx, "8000/hello.txt"); err != nil || code != 200 || body != "via the relay\n" {
			t.Errorf("another port after the stall: %d %q %v", code, body, err)
		}
		m := string(e.must(http.StatusOK, "GET", "/metrics", "system", nil).Body)
		if !strings.Contains(m, `sandbox_port_connections_total{path="relay"}`) {
			t.Errorf("no connection went through the relay:\n%s", grepLines(m, "sandbox_port_connections_total"))
		}
		// The sentry is still in that connect (TCP's retries, ~2 minutes): the
		// runtime's list of every sandbox (the reaper's sweep, the pools')
		// does not wait for it.
		t0 = time.Now()
		if objs, err := e.srv.Runtime.List(ctx, nil); err != nil || len(objs) == 0 || time.Since(t0) > 5*time.Second {
			t.Errorf("the runtime's list beside the stuck connect: %d objects, %v, in %v", len(objs), err, time.Since(t0))
		}
	})
}
