// The driver of a JavaScript code context (cmd/sandbox-runner/contexts.go
// runs it as `node -e <this>`): one V8 context (node:vm) whose globals and
// top-level declarations persist between runs, the way Node's own REPL
// keeps them. Each request line on stdin ({"code", "timeout"}) runs as a
// script in it; console output, the value of the last expression
// (util.inspect, awaited when it is a promise) and an exception come back as
// JSON lines on stdout (procwire.Event), ending with {"type": "end"}.
// SIGINT interrupts a running script (breakOnSigint), as Jupyter's
// interrupt does a kernel; the context stays.
"use strict";
const vm = require("node:vm");
const util = require("node:util");
const readline = require("node:readline");
const { Console } = require("node:console");
const { Writable } = require("node:stream");
const { createRequire } = require("node:module");

const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const stream = (type) => new Writable({ write(chunk, _enc, done) { say({ type, text: chunk.toString() }); done(); } });

const sandbox = {
  console: new Console({ stdout: stream("stdout"), stderr: stream("stderr") }),
  require: createRequire(process.cwd() + "/"),
  process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder, fetch: globalThis.fetch,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask, structuredClone,
};
const context = vm.createContext(sandbox);
// Interrupts reach the running script only (breakOnSigint); between runs
// a SIGINT is dropped instead of ending the context.
process.on("SIGINT", () => {});

let count = 0;
const queue = [];
let busy = false;

async function run(req) {
  count++;
  const timeout = req.timeout > 0 ? req.timeout * 1000 : undefined;
  let timedOut = false;
  try {
    const script = new vm.Script(req.code ?? "", { filename: `run-${count}.js` });
    let value = script.runInContext(context, { timeout, breakOnSigint: true, displayErrors: false });
    if (value && typeof value.then === "function") {
      value = await (timeout ? Promise.race([value, new Promise((_, reject) => setTimeout(() => reject(Object.assign(new Error("timeout"), { code: "ERR_SCRIPT_EXECUTION_TIMEOUT" })), timeout))]) : value);
    }
    if (value !== undefined) {
      say({ type: "result", data: { "text/plain": util.inspect(value, { depth: 4 }) }, isMainResult: true });
    }
  } catch (e) {
    const err = e instanceof Error || (e && typeof e === "object" && "message" in e) ? e : { name: "Error", message: util.inspect(e), stack: "" };
    if (err.code === "ERR_SCRIPT_EXECUTION_TIMEOUT") {
      timedOut = true;
      say({ type: "error", name: "TimeoutError", value: `the run passed its ${req.timeout} s timeout and was interrupted; the context's state is kept`, traceback: [] });
    } else if (err.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") {
      say({ type: "error", name: "KeyboardInterrupt", value: "interrupted", traceback: [] });
    } else {
      // The driver's own frames are not the caller's business.
      const frames = String(err.stack ?? "").split("\n").filter((l) => !/\[eval\]|\(node:|at node:/.test(l));
      say({ type: "error", name: String(err.name ?? "Error"), value: String(err.message ?? ""), traceback: frames });
    }
  }
  // Output a run's own timers write after its end is not waited for.
  say({ type: "end", executionCount: count, timedOut });
}

async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) await run(queue.shift());
  busy = false;
}

say({ ready: true, kernelPid: process.pid });
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  try {
    queue.push(JSON.parse(line));
  } catch {
    return;
  }
  pump();
}).on("close", () => process.exit(0));
