// The driver of a JavaScript code context (cmd/sandbox-runner/contexts.go
// runs it as `node -e <this>`): one V8 context (node:vm) whose globals and
// top-level declarations persist between runs, the way Node's own REPL
// keeps them. Each request line on stdin ({"code", "timeout"}) runs as a
// script in it; console output, the value of the last expression
// (util.inspect, awaited when it is a promise) and an exception come back as
// JSON lines on stdout (procwire.Event), ending with {"type": "end"}.
// SIGINT interrupts a running script (breakOnSigint), as Jupyter's
// interrupt does a kernel; the context stays. A script with await at its
// top level runs as Node's REPL runs one (topLevelAwait below).
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

// topLevelAwait rewrites a script that has await outside any function
// into an async function the context runs, the way Node's REPL does
// (lib/internal/repl/await.js), with the image's acorn (Debian's
// node-acorn): its top-level declarations become the context's globals
// (a const among them, as in the REPL, a variable), a top-level function
// is assigned to the global of its name as well, and the value of its
// last expression is what the function returns. null: no rewrite (no
// acorn, no await outside a function, or the code does not parse even
// with await allowed). The parse decides, not V8's error: in a sloppy
// script "await (x)" is a call of a function named await.
function topLevelAwait(code) {
  let acorn, walk;
  try {
    acorn = require("acorn");
    walk = require("acorn-walk");
  } catch {
    return null;
  }
  let ast;
  try {
    ast = acorn.parse(code, { ecmaVersion: "latest", sourceType: "script", allowAwaitOutsideFunction: true });
  } catch {
    return null;
  }
  let awaits = false;
  const inner = () => {}; // a function's own awaits are its own
  walk.recursive(ast, null, {
    FunctionDeclaration: inner, FunctionExpression: inner, ArrowFunctionExpression: inner,
    AwaitExpression() { awaits = true; },
    ForOfStatement(node, st, c) {
      if (node.await) awaits = true;
      walk.base.ForOfStatement(node, st, c);
    },
  });
  if (!awaits) return null;
  const names = new Set();
  const bind = (p) => {
    if (!p) return;
    switch (p.type) {
      case "Identifier": names.add(p.name); break;
      case "ObjectPattern": p.properties.forEach((q) => bind(q.type === "RestElement" ? q.argument : q.value)); break;
      case "ArrayPattern": p.elements.forEach(bind); break;
      case "RestElement": bind(p.argument); break;
      case "AssignmentPattern": bind(p.left); break;
    }
  };
  const text = (n) => code.slice(n.start, n.end);
  const edits = [];
  const hoisted = [];
  ast.body.forEach((node, i) => {
    switch (node.type) {
      case "VariableDeclaration":
        node.declarations.forEach((d) => bind(d.id));
        edits.push([node.start, node.end, `void (${node.declarations.map((d) => `(${text(d.id)} = ${d.init ? text(d.init) : "undefined"})`).join(", ")});`]);
        break;
      case "ClassDeclaration":
        names.add(node.id.name);
        edits.push([node.start, node.end, `${node.id.name} = ${text(node)};`]);
        break;
      case "FunctionDeclaration":
        hoisted.push(`globalThis[${JSON.stringify(node.id.name)}] = ${node.id.name};`);
        break;
      case "ExpressionStatement":
        if (i === ast.body.length - 1) edits.push([node.start, node.end, `return (${text(node.expression)});`]);
        break;
    }
  });
  let body = code;
  for (const [start, end, repl] of edits.reverse()) body = body.slice(0, start) + repl + body.slice(end);
  // Each name a global of the context before the function assigns it
  // (one a run before declared with let stays that binding).
  for (const name of names) {
    try {
      vm.runInContext(`var ${name};`, context);
    } catch {}
  }
  return `(async () => { ${hoisted.join(" ")}\n${body}\n})()`;
}

let count = 0;
const queue = [];
let busy = false;

async function run(req) {
  count++;
  const timeout = req.timeout > 0 ? req.timeout * 1000 : undefined;
  let timedOut = false;
  try {
    const filename = `run-${count}.js`;
    const code = req.code ?? "";
    const rewritten = /\bawait\b/.test(code) ? topLevelAwait(code) : null;
    const script = new vm.Script(rewritten ?? code, { filename });
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
