// The TypeScript SDK against a real server (SANDBOX_URL, SANDBOX_KEY): run by
// sdk/sdk_test.go, which starts one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError, info, runCode } from "../index.mjs";

// What the server's backend does, by GET /v1/info: cases skip by capability.
const CAPS = (await info()).capabilities;
const mainText = (ex) => ex.results.find((r) => r.isMainResult)?.data["text/plain"];

test("a sandbox, end to end", async () => {
  const sbx = await Sandbox.create({ timeoutSec: 300 });
  try {
    assert.equal(sbx.info.kind, "sandbox");
    assert.equal(sbx.info.status, "running");
    assert.ok(sbx.info.expiresAt - Date.now() / 1000 > 240); // a lease within a minute, on a busy machine too

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
    await sbx.narrate("build", "built");
    const kinds = [];
    for await (const e of sbx.logs("build")) {
      kinds.push(e.kind);
      if (e.kind === "note") break;
    }
    assert.ok(kinds.includes("stdout") && kinds.includes("exit"), kinds.join(","));

    await sbx.setTimeout(600);
    assert.ok(sbx.info.expiresAt - Date.now() / 1000 > 590);
    await sbx.sleep();
    assert.equal(sbx.info.status, "sleeping");
    await sbx.wake();
    assert.equal(sbx.info.status, "running");
    await sbx.pause(); // the old names stay
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

// cutFetch breaks the first output stream after its first event, as a
// dropped connection does, and records the offset each output request
// asked from; restore() puts fetch back.
function cutFetch(suffix = "/output") {
  const real = globalThis.fetch;
  const starts = [];
  globalThis.fetch = async (url, opts) => {
    const res = await real(url, opts);
    const u = new URL(url);
    if (!u.pathname.endsWith(suffix) || res.headers.get("content-type") !== "text/event-stream") return res;
    starts.push(u.searchParams.get("from") ?? opts?.headers?.["last-event-id"] ?? "");
    if (starts.length > 1) return res;
    const reader = res.body.getReader();
    let blanks = 2;
    let prev = 0;
    const body = new ReadableStream({
      async pull(ctl) {
        const { value, done } = await reader.read();
        if (done) return ctl.close();
        for (let i = 0; i < value.length; i++) {
          if (value[i] === 10 && prev === 10 && --blanks === 0) {
            ctl.enqueue(value.slice(0, i + 1));
            await reader.cancel();
            return ctl.error(new TypeError("terminated"));
          }
          prev = value[i];
        }
        ctl.enqueue(value);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  return { starts, restore: () => (globalThis.fetch = real) };
}

async function collect(gen) {
  const events = [];
  for await (const ev of gen) events.push(ev);
  const text = new TextDecoder().decode(Buffer.concat(events.map((e) => e.data)));
  return { events, text, end: events.at(-1) };
}

test("background processes and fork", async () => {
  const sbx = await Sandbox.create();
  try {
    const p = await sbx.startProcess("for i in 1 2 3; do echo line $i; sleep 0.5; done; echo gone >&2; exit 3");
    assert.ok(p.pid > 0);
    assert.equal(p.status, "running");

    // Followed across a dropped connection: resumed after the last event, each byte once.
    const cut = cutFetch();
    let got;
    try {
      got = await collect(sbx.processOutput(p.pid));
    } finally {
      cut.restore();
    }
    assert.equal(got.text, "line 1\nline 2\nline 3\ngone\n");
    assert.equal(got.end.kind, "end");
    assert.equal(got.end.process.exitCode, 3);
    // The first event holds what the ring had when the follow began (a line, or more on a slower
    // backend); the resume asks from its end.
    assert.deepEqual(cut.starts, ["", String(got.events[0].data.length)]);
    assert.equal((await collect(sbx.processOutput(p.pid, { from: 14 }))).text, "line 3\ngone\n");

    const cat = await sbx.startProcess(["cat"], { stdin: "a\n" });
    assert.equal(await sbx.sendStdin(cat.pid, new Uint8Array([98, 0, 255, 10]), { eof: true }), 4);
    const bytes = Buffer.concat((await collect(sbx.processOutput(cat.pid))).events.map((e) => e.data));
    assert.deepEqual([...bytes], [97, 10, 98, 0, 255, 10]);

    const tty = await sbx.startProcess("trap 'stty size; exit 0' USR1; echo ready; while :; do sleep 0.1; done", { tty: true, cols: 80, rows: 24 });
    const ttyOut = sbx.processOutput(tty.pid);
    for (let seen = ""; !seen.includes("ready"); ) seen += new TextDecoder().decode((await ttyOut.next()).value.data); // the trap is set
    assert.equal((await sbx.resizeProcess(tty.pid, 120, 40)).tty, true);
    await sbx.signal(tty.pid, "USR1");
    assert.match((await collect(ttyOut)).text, /40 120/);

    const sleeper = await sbx.startProcess(["sh", "-c", "echo $X; exec sleep 600"], { envs: { X: "from-env" } });
    const fork = await sbx.fork({ timeoutSec: 300, metadata: { side: "fork" } });
    try {
      assert.notEqual(fork.id, sbx.id);
      assert.deepEqual(fork.info.metadata, { side: "fork" });
      if (fork.info.memoryKept) {
        assert.equal((await fork.process(sleeper.pid)).status, "running");
      } else {
        // Files only (a pod's memory is not copied): the fork says so and has none of the original's processes.
        assert.equal(fork.info.memoryKept, false);
        await assert.rejects(fork.process(sleeper.pid), (e) => e instanceof SandboxError && e.status === 404);
      }
    } finally {
      await fork.kill();
    }
    await assert.rejects(sbx.fork({ project: "p" }), (e) => e instanceof SandboxError && e.status === 400 && /no project/.test(e.message));

    // Followed live: the first line, then the signal, then the end.
    const live = sbx.processOutput(sleeper.pid);
    assert.equal(new TextDecoder().decode((await live.next()).value.data), "from-env\n");
    await sbx.signal(sleeper.pid);
    const ended = await collect(live);
    assert.equal(ended.end.process.signal, "SIGTERM");
    assert.equal(ended.end.process.exitCode, 143);
    await assert.rejects(sbx.signal(sleeper.pid, "BOGUS"), (e) => e instanceof SandboxError && e.status === 400);
    assert.deepEqual((await sbx.processes()).map((q) => q.pid), [p.pid, cat.pid, tty.pid, sleeper.pid]);
    await assert.rejects(sbx.process(99999), (e) => e instanceof SandboxError && e.status === 404);
    await assert.rejects(collect(sbx.processOutput(99999)), (e) => e instanceof SandboxError && e.status === 404);
  } finally {
    await sbx.kill();
  }
});

// The name the test server's sandboxes may reach in its own test internet
// (sdk/sdk_test.go); unset: the server was started without a network.
const NETWORK = process.env.SANDBOX_TEST_NETWORK;
const FETCH =
  "import sys, urllib.request\n" +
  "try: print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())\n" +
  "except Exception as e: print('refused', type(e).__name__)";

test("the network: leased, changed, refused", { skip: !NETWORK && "the test server was started with no network" }, async () => {
  const sbx = await Sandbox.create({ network: { allow: [NETWORK] } });
  try {
    assert.deepEqual(sbx.info.network, { allow: [NETWORK] });
    let r = await sbx.commands.run(["python3", "-c", FETCH, `http://${NETWORK}/`]);
    assert.ok(r.stdout.includes(NETWORK) && !r.stdout.includes("refused"), r.stdout);
    await sbx.setNetwork({});
    assert.ok(!sbx.info.network?.allow?.length);
    r = await sbx.commands.run(["python3", "-c", FETCH, `http://${NETWORK}/`]);
    assert.match(r.stdout, /refused/);
    await assert.rejects(sbx.setNetwork({ alow: ["internet"] }), TypeError);
  } finally {
    await sbx.kill();
  }
  const closed = await Sandbox.create();
  try {
    await assert.rejects(closed.setNetwork({ allow: [NETWORK] }), (e) => e instanceof SandboxError && e.status === 409);
  } finally {
    await closed.kill();
  }
});

// The installs an agent makes (internal/testenv's ServePackages), against the package index,
// npm registry and git server the test server's internet serves on NETWORK.
const PACKAGES = JSON.parse(process.env.SANDBOX_TEST_PACKAGES || "[]");

test("pip, npm and git from the network", { skip: !(NETWORK && PACKAGES.length) && "the test server serves no package index" }, async () => {
  const sbx = await Sandbox.create({ timeoutSec: 600, network: { allow: [NETWORK] } });
  try {
    for (const step of PACKAGES) {
      const r = await sbx.commands.run(["bash", "-c", step.script + " 2>&1"], { timeoutSec: 240 });
      assert.ok(r.exitCode === 0 && r.stdout.includes(step.want), `${step.name}: exit ${r.exitCode}\n${r.stdout}`);
    }
  } finally {
    await sbx.kill();
  }
});

test("a preview's host", async () => {
  const sbx = await Sandbox.create();
  try {
    const url = new URL(await sbx.getHost(8000, { timeoutSec: 600 }));
    assert.ok(url.hostname.startsWith(`8000-${sbx.id.replace("_", "-")}.`), url.href);
    assert.ok(url.searchParams.size > 0, url.href);
  } finally {
    await sbx.kill();
  }
});

test("code contexts", async () => {
  const sbx = await Sandbox.create({ timeoutSec: 300 });
  try {
    const ctx = await sbx.createCodeContext({ language: "python" });
    assert.equal(ctx.language, "python");
    await sbx.runCode("x = 40", { context: ctx });
    const seen = [];
    const ex = await sbx.runCode("print('hi'); x + 2", { context: ctx, onStdout: (t) => seen.push(t) });
    assert.deepEqual(seen, ["hi\n"]);
    assert.equal(ex.results.find((r) => r.isMainResult).data["text/plain"], "42");
    const plot = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", { context: ctx });
    assert.ok(plot.results.some((r) => (r.data["image/png"] ?? "").startsWith("iVBOR")));
    const frame = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1]})", { context: ctx });
    assert.match(frame.results.find((r) => r.isMainResult).data["text/html"], /<table/);
    const err = await sbx.runCode("1/0", { context: ctx });
    assert.equal(err.error.name, "ZeroDivisionError");
    assert.ok(err.error.traceback.length > 0);
    const slow = await sbx.runCode("import time; time.sleep(30)", { context: ctx, timeoutSec: 2 });
    assert.ok(slow.timedOut);
    assert.equal(slow.error.name, "TimeoutError");
    assert.equal(mainText(await sbx.runCode("x", { context: ctx })), "40");
    const other = await sbx.runCode("x", { language: "python" });
    assert.equal(other.error.name, "NameError");
    assert.deepEqual((await sbx.listCodeContexts()).map((c) => c.id), [ctx.id, "python"]);
    // The kernel is a child of the sandbox's runner: it sleeps and wakes with it, and a fork
    // that keeps memory has its variables too.
    if (CAPS.includes("checkpoint")) {
      await sbx.sleep();
      assert.equal(sbx.info.status, "sleeping");
      await sbx.wake();
      assert.equal(mainText(await sbx.runCode("x * 6", { context: ctx })), "240");
      const fork = await sbx.fork({ timeoutSec: 120 });
      try {
        if (fork.info.memoryKept) assert.equal(mainText(await fork.runCode("x + 2", { context: ctx })), "42");
      } finally {
        await fork.kill();
      }
    }
    await sbx.removeCodeContext(ctx);
    await assert.rejects(sbx.runCode("x", { context: ctx }), (e) => e instanceof SandboxError && e.status === 404);
  } finally {
    await sbx.kill();
  }
});

test("a file watch", async () => {
  const sbx = await Sandbox.create({ timeoutSec: 300 });
  try {
    await sbx.commands.run("mkdir -p build");
    const seen = [];
    let got;
    const written = new Promise((resolve) => { got = resolve; });
    // The stream drops after its first event (ready): the watch resumes after it, and what was made
    // meanwhile comes.
    const cut = cutFetch("/fs/watch");
    let w;
    try {
      w = await sbx.files.watchDir("build", (e) => { seen.push(`${e.type} ${e.name}`); if (e.type === "written") got(); });
      await sbx.commands.run("echo done > build/out.txt");
      await written;
    } finally {
      cut.restore();
    }
    w.stop();
    assert.deepEqual(seen, ["created out.txt", "written out.txt"]);
    assert.equal(cut.starts.length, 2);
    assert.equal(cut.starts[0], "");
    assert.match(cut.starts[1], /^\w+\.\d+$/);
  } finally {
    await sbx.kill();
  }
});

test("org calls and session files", async () => {
  const sdk = await import("../index.mjs");
  assert.ok(["gvisor", "kube"].includes((await sdk.info()).backend));
  assert.ok((await sdk.quotas()).length > 0);
  assert.ok(Array.isArray(await sdk.usage()) && Array.isArray(await sdk.volumes()));
  const r = await runCode("py", "open('out.txt', 'w').write('hi')");
  assert.deepEqual((await sdk.sessionFiles(r.session_id)).map((f) => f.path), ["out.txt"]);
  assert.deepEqual((await sdk.uploadFile(r.session_id, "in.csv", "a,b\n")).map((f) => f.path), ["in.csv"]);
  assert.equal(new TextDecoder().decode(await sdk.downloadFile(r.session_id, "in.csv")), "a,b\n");
});
