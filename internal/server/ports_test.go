package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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

// TestPortPreviewOnRunsc: an HTTP server on the sandbox's own loopback
// answers through /v1/sandbox/{id}/ports/{port}/…, relayed over the exec
// channel; the caller's key does not reach it; nothing listening is a 502;
// another org's sandbox is a 404.
func TestPortPreviewOnRunsc(t *testing.T) {
	e := newEnv(t)
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
}
