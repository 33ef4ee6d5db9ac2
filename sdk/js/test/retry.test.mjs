// The retry rule (pure logic, a stand-in server on loopback): a 429 with
// Retry-After is waited out for any call; a 503 only for a GET; the bound
// holds; the message comes through unchanged.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Sandbox, SandboxError } from "../index.mjs";

test("retry", async () => {
  let status = 429, refusals = 0, calls = 0;
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      calls++;
      if (calls <= refusals) {
        res.writeHead(status, { "retry-after": "1", "content-type": "application/json" });
        return res.end(JSON.stringify({ error: "quota live exceeded: limit 16" }));
      }
      res.writeHead(201, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "sb_x", kind: "sandbox" }));
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const opts = { apiUrl: `http://127.0.0.1:${srv.address().port}`, apiKey: "k", maxWaitMs: 5 };
  const run = (s, n, f) => { status = s; refusals = n; calls = 0; return f(); };
  try {
    assert.equal((await run(429, 2, () => Sandbox.create(opts))).id, "sb_x");
    assert.equal(calls, 3);
    await assert.rejects(run(503, 1, () => Sandbox.create(opts)), (e) => e instanceof SandboxError && e.status === 503);
    assert.equal(calls, 1);
    assert.equal((await run(503, 2, () => Sandbox.connect("sb_x", opts))).id, "sb_x");
    assert.equal(calls, 3);
    await assert.rejects(run(429, 10, () => Sandbox.connect("sb_x", opts)), (e) => e.message === "quota live exceeded: limit 16");
    assert.equal(calls, 4);
  } finally {
    srv.close();
  }
});
