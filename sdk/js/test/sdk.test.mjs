// The TypeScript SDK against a real server (SANDBOX_URL, SANDBOX_KEY): run by
// sdk/sdk_test.go, which starts one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError, runCode } from "../index.mjs";

test("a sandbox, end to end", async () => {
  const sbx = await Sandbox.create({ timeoutSec: 300 });
  try {
    assert.equal(sbx.info.kind, "sandbox");
    assert.equal(sbx.info.status, "running");
    assert.ok(sbx.info.expiresAt - Date.now() / 1000 > 290);

    let r = await sbx.commands.run("read x; echo got-$x; exit 3", { stdin: "hi\n" });
    assert.deepEqual([r.exitCode, r.stdout], [3, "got-hi\n"]);
    r = await sbx.commands.run(["sleep", "30"], { timeoutSec: 1 });
    assert.ok(r.timedOut);
    assert.equal(r.exitCode, 124);

    const got = [];
    const sr = await sbx.commands.stream("for i in 1 2; do echo $i; sleep 1; done; exit 4", { onStdout: (b) => got.push(new TextDecoder().decode(b)) });
    assert.equal(sr.exitCode, 4);
    assert.equal(got.join(""), "1\n2\n");

    const data = new Uint8Array([0, 255, 1, 10, 0xc3, 0x28]);
    assert.equal(await sbx.files.write("d/bin.dat", data), data.length);
    assert.deepEqual(await sbx.files.read("d/bin.dat"), data);
    assert.deepEqual(await sbx.files.list("d"), ["bin.dat"]);
    const tgz = await sbx.files.archive("d", { gzip: true });
    assert.ok((await sbx.files.extract("d2", tgz)).entries >= 1);
    assert.deepEqual(await sbx.files.read("d2/bin.dat"), data);
    assert.ok((await sbx.stats()).processes >= 1);
    await sbx.setMetadata({ suite: "js" });
    assert.deepEqual(sbx.info.metadata, { suite: "js" });
    assert.deepEqual((await Sandbox.list({ metadata: { suite: "js" } })).map((s) => s.id), [sbx.id]);

    assert.equal((await sbx.ops.write("typed.txt", "typed")).bytes, 5);
    assert.equal((await sbx.ops.read("typed.txt")).data, "typed");
    assert.equal((await sbx.ops.read()).dir, true);
    assert.equal((await sbx.ops.run("exit 9")).exitCode, 9);

    const pty = await sbx.pty.create();
    let seen = "";
    const shown = new Promise((resolve) => pty.onData((b) => {
      seen += new TextDecoder().decode(b);
      if (seen.includes("42-100")) resolve();
    }));
    pty.resize(100, 30);
    pty.send("echo $((6*7))-$(tput cols)\r");
    await shown;
    pty.send("exit\r");
    assert.match(await pty.exited, /exited/);

    await sbx.commands.run("echo narrated", { session: "build" });
    const kinds = [];
    for await (const e of sbx.logs("build")) {
      kinds.push(e.kind);
      if (e.kind === "exit") break;
    }
    assert.ok(kinds.includes("stdout"), kinds.join(","));

    await sbx.setTimeout(600);
    assert.ok(sbx.info.expiresAt - Date.now() / 1000 > 590);
    await sbx.pause();
    assert.equal(sbx.info.status, "sleeping");
    await sbx.resume();
    assert.equal(sbx.info.status, "running");
    assert.equal((await Sandbox.connect(sbx.id)).id, sbx.id);
    assert.ok((await Sandbox.list()).some((s) => s.id === sbx.id));
  } finally {
    await sbx.kill();
  }
  await assert.rejects(Sandbox.connect(sbx.id), (e) => e instanceof SandboxError && e.status === 404);
});

test("a refusal carries the server's message", async () => {
  await assert.rejects(Sandbox.create({ class: "huge" }), (e) => e instanceof SandboxError && e.status === 400 && /exec/.test(e.message));
});

test("the interpreter", async () => {
  const r = await runCode("py", "import sys\nprint(6*7)\nsys.exit(2)");
  assert.deepEqual([r.exitCode, r.stdout], [2, "42\n"]);
});
