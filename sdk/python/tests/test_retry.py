"""The retry rule (pure logic, a stand-in server on loopback): a 429 with
Retry-After is waited out for any call; a 503 only for a GET; the bound
holds; the message comes through unchanged."""

import http.server
import json
import threading

import pytest

from sandboxd import Sandbox, SandboxError


class Stub(http.server.BaseHTTPRequestHandler):
    refusals = 0
    status = 429
    calls = 0

    def answer(self):
        type(self).calls += 1
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if type(self).calls <= type(self).refusals:
            body = json.dumps({"error": "quota live exceeded: limit 16"}).encode()
            self.send_response(type(self).status)
            self.send_header("Retry-After", "1")
        else:
            body = json.dumps({"id": "sb_x", "kind": "sandbox", "org": "o", "class": "exec", "status": "running", "image": "exec",
                               "runtime": "gvisor", "workdir": "/mnt/data", "createdAt": 1, "lastUsedAt": 1, "expiresAt": 2}).encode()
            self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *a):
        pass


@pytest.fixture
def stub(monkeypatch):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setattr("time.sleep", lambda s: None)  # the test does not wait out the seconds
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def run(url, status, refusals, call):
    Stub.status, Stub.refusals, Stub.calls = status, refusals, 0
    return call(url)


def test_retry(stub):
    lease = lambda u: Sandbox.create(api_url=u, api_key="k")
    get = lambda u: Sandbox.connect("sb_x", api_url=u, api_key="k")
    assert run(stub, 429, 2, lease).id == "sb_x" and Stub.calls == 3
    with pytest.raises(SandboxError) as e:
        run(stub, 503, 1, lease)
    assert e.value.status == 503 and Stub.calls == 1
    assert run(stub, 503, 2, get).id == "sb_x" and Stub.calls == 3
    with pytest.raises(SandboxError) as e:
        run(stub, 429, 10, get)
    assert e.value.message == "quota live exceeded: limit 16" and Stub.calls == 4
