// @sandboxd/sdk — the TypeScript/JavaScript SDK of the sandbox service.
// The types are in index.d.ts; this file is plain ESM on Node's own fetch
// and WebSocket, with no dependency.

/** A refusal of the server: its status and message, unchanged. */
/** An egress policy as the API takes it: allow, deny (lists) and ports; anything else is a mistake. */
function networkBody(policy) {
  const p = policy ?? {};
  const unknown = Object.keys(p).filter((k) => !["allow", "deny", "ports"].includes(k));
  if (unknown.length) throw new TypeError(`network policy: unknown keys ${unknown.join(", ")} (allow, deny, ports)`);
  return Object.fromEntries(Object.entries(p).filter(([, v]) => v && v.length));
}

export class SandboxError extends Error {
  constructor(status, message, retryAfter) {
    super(`${status}: ${message}`);
    this.name = "SandboxError";
    this.status = status;
    this.message = message;
    this.retryAfter = retryAfter;
  }
}

// A 429 is a refusal before any work, for any call; a 503 may be repeated
// only where doing it again changes nothing.
const SAFE = new Set(["GET", "PUT", "DELETE"]);

function config(opts = {}) {
  const apiUrl = (opts.apiUrl ?? process.env.SANDBOX_URL ?? "").replace(/\/$/, "");
  const apiKey = opts.apiKey ?? process.env.SANDBOX_KEY ?? "";
  if (!apiUrl || !apiKey) throw new Error("no server or key: pass { apiUrl, apiKey }, or set SANDBOX_URL and SANDBOX_KEY");
  return { apiUrl, apiKey, retries: opts.retries ?? 3, maxWaitMs: opts.maxWaitMs ?? 30000 };
}

async function refusal(res) {
  const text = await res.text();
  let message = text.trim();
  try {
    message = JSON.parse(text).error ?? message;
  } catch {}
  const ra = Number.parseInt(res.headers.get("retry-after") ?? "", 10);
  return new SandboxError(res.status, message, Number.isFinite(ra) && ra > 0 ? ra : undefined);
}

class HTTP {
  constructor(opts) {
    Object.assign(this, config(opts));
  }

  /** One call; a JSON body (json) or a raw one (body); the Response on success. */
  async request(method, path, { json, body, query, headers = {}, signal } = {}) {
    let url = this.apiUrl + path;
    if (query) {
      const q = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== ""));
      if ([...q].length) url += "?" + q;
    }
    const h = { authorization: `Bearer ${this.apiKey}`, ...headers };
    if (json !== undefined) h["content-type"] = "application/json";
    for (let attempt = 0; ; attempt++) {
      const res = await fetch(url, { method, headers: h, body: json !== undefined ? JSON.stringify(json) : body, signal });
      if (res.status < 400) return res;
      const err = await refusal(res);
      const retry = err.retryAfter && attempt < this.retries && body === undefined &&
        (err.status === 429 || (err.status === 503 && SAFE.has(method)));
      if (!retry) throw err;
      await new Promise((r) => setTimeout(r, Math.min(err.retryAfter * 1000, this.maxWaitMs)));
    }
  }

  async json(method, path, opts) {
    return (await this.request(method, path, opts)).json();
  }
}

/** ``sbx.commands``: run a command and wait for it. */
class Commands {
  constructor(sbx) {
    this.sbx = sbx;
  }

  /** Run a shell line (or an argv array) and wait; a non-zero exit is a result. */
  async run(cmd, { stdin, cwd, timeoutSec, envs, session } = {}) {
    const body = Array.isArray(cmd) ? { argv: cmd } : { command: cmd };
    if (stdin !== undefined) body.stdin = stdin;
    if (cwd) body.dir = cwd;
    if (timeoutSec) body.timeoutSec = timeoutSec;
    if (envs) body.env = envs;
    if (session) body.session = session;
    return this.sbx.http.json("POST", `/v1/sandbox/${this.sbx.id}/exec`, { json: body });
  }

  /** Run and hand the output (bytes) to onStdout/onStderr as it is written; resolves with the exit. */
  async stream(cmd, { onStdout, onStderr, stdin, timeoutSec } = {}) {
    const body = Array.isArray(cmd) ? { argv: cmd } : { command: cmd };
    if (stdin !== undefined) body.stdin = stdin;
    if (timeoutSec) body.timeoutSec = timeoutSec;
    const res = await this.sbx.http.request("POST", `/v1/sandbox/${this.sbx.id}/exec`, { json: body, headers: { accept: "application/x-ndjson" } });
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const d = JSON.parse(buf.slice(0, i));
        buf = buf.slice(i + 1);
        if (d.error) throw new SandboxError(502, d.error);
        if (d.exitCode !== undefined) return { exitCode: d.exitCode, stdout: "", stderr: "", timedOut: d.timedOut, stopped: d.stopped };
        for (const [key, fn] of [["stdout", onStdout], ["stderr", onStderr]]) {
          const bytes = d[key] !== undefined ? new TextEncoder().encode(d[key]) : d[key + "Base64"] !== undefined ? Uint8Array.from(atob(d[key + "Base64"]), (c) => c.charCodeAt(0)) : null;
          if (bytes && fn) fn(bytes);
        }
      }
    }
    throw new SandboxError(502, "the exec stream ended before the exit");
  }
}

/** ``sbx.files``: whole files, binary-safe, and directory listings. */
class Files {
  constructor(sbx) {
    this.sbx = sbx;
  }

  /**
   * Watch a directory: ``onEvent`` gets each change ({type: created|written|removed|renamed|overflow, name})
   * as the sandbox makes it, until ``stop()``. Resolves once the watch is in place.
   */
  async watchDir(path, onEvent, { recursive = false } = {}) {
    const ac = new AbortController();
    const query = { path, recursive: recursive ? "1" : undefined };
    let last = ""; // the id of the last event handed on: a broken stream resumes after it
    const open = () => this.sbx.http.request("GET", `/v1/sandbox/${this.sbx.id}/fs/watch`, {
      query, headers: { accept: "text/event-stream", ...(last ? { "last-event-id": last } : {}) }, signal: ac.signal });
    let ready;
    const isReady = new Promise((resolve, reject) => { ready = { resolve, reject }; });
    let seenReady = false;
    // One connection's events; true when the server ended the stream (a broken one throws).
    const read = async (res) => {
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      let id = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return true;
        buf += decoder.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.startsWith("id: ")) id = line.slice(4);
          if (!line.startsWith("data: ")) continue;
          const ev = JSON.parse(line.slice(6));
          last = id;
          if (ev.type !== "ready") onEvent(ev);
          else if (!seenReady) { seenReady = true; ready.resolve(); }
        }
      }
    };
    const first = await open();
    const pump = (async () => {
      let res = first;
      for (let failed = 0; ; ) {
        const before = last;
        try {
          if (await read(res)) return;
        } catch (e) {
          if (ac.signal.aborted) return;
          if (last === before && ++failed >= 5) throw e;
          if (last !== before) failed = 0;
        }
        await new Promise((r) => setTimeout(r, 100 << failed));
        if (ac.signal.aborted) return;
        res = await open();
      }
    })().catch((e) => { if (!ac.signal.aborted) ready.reject(e); });
    await Promise.race([isReady, pump.then(() => { throw new SandboxError(502, "the watch ended before it was in place"); })]);
    return { stop: () => ac.abort() };
  }

  /** The file's bytes. */
  async read(path) {
    const res = await this.sbx.http.request("GET", `/v1/sandbox/${this.sbx.id}/fs`, { query: { path } });
    if (res.headers.get("x-sandbox-kind") === "directory") {
      await res.body?.cancel();
      throw new SandboxError(400, `${path} is a directory; use files.list`);
    }
    return new Uint8Array(await res.arrayBuffer());
  }

  /** The file's text (UTF-8). */
  async readText(path) {
    return new TextDecoder().decode(await this.read(path));
  }

  /** Write the whole file (parents are created); its size. */
  async write(path, data) {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const r = await this.sbx.http.json("POST", `/v1/sandbox/${this.sbx.id}/fs`, {
      query: { path }, body, headers: { "content-type": "application/octet-stream" },
    });
    return r.bytes;
  }

  /** A directory as a tar (gzipped with { gzip: true }). */
  async archive(path = "", { gzip = false } = {}) {
    const res = await this.sbx.http.request("GET", `/v1/sandbox/${this.sbx.id}/fs/archive`, { query: { path, gzip: gzip ? "1" : undefined } });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** Unpack a tar or tar.gz under path; an entry that would leave it refuses the archive, nothing written. */
  async extract(path, data) {
    return this.sbx.http.json("POST", `/v1/sandbox/${this.sbx.id}/fs/archive`, { query: { path }, body: data, headers: { "content-type": "application/x-tar" } });
  }

  /** A directory's entries; directories end in '/'. */
  async list(path = "") {
    const res = await this.sbx.http.request("GET", `/v1/sandbox/${this.sbx.id}/fs`, { query: { path } });
    const text = await res.text();
    if (res.headers.get("x-sandbox-kind") !== "directory") throw new SandboxError(400, `${path} is a file, not a directory`);
    return text.split("\n").filter((e) => e);
  }
}

// How often in a row a process's output stream may break with nothing new
// before processOutput gives up.
const STREAM_TRIES = 5;

const b64bytes = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

/** Parses a process's output stream line by line into events; ``last`` is the offset after the last one. */
class OutputStream {
  constructor(start) {
    this.last = start;
    this.ended = false;
    this.reset();
  }

  reset() {
    this.id = this.event = undefined;
    this.data = [];
  }

  /** One line (without its end); an event, or undefined. */
  feed(line) {
    if (line !== "") {
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? "" : line.slice(i + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") this.id = value;
      else if (field === "event") this.event = value;
      else if (field === "data") this.data.push(value);
      return undefined;
    }
    const { id, event: kind } = this;
    const data = this.data.join("\n");
    this.reset();
    if (!kind) return undefined; // a comment (: ping) or the retry hint
    if (kind === "error") throw new StreamBroken(JSON.parse(data).error ?? data);
    if (!["stdout", "stderr", "dropped", "end"].includes(kind)) return undefined;
    const d = JSON.parse(data);
    const ev = { kind, offset: Number(id), data: new Uint8Array() };
    if (kind === "stdout" || kind === "stderr") {
      ev.data = d[kind + "Base64"] !== undefined ? b64bytes(d[kind + "Base64"]) : new TextEncoder().encode(d[kind] ?? "");
    } else if (kind === "dropped") {
      ev.droppedBytes = d.droppedBytes;
    } else {
      ev.process = d;
      this.ended = true;
    }
    this.last = ev.offset;
    return ev;
  }
}

class StreamBroken extends Error {}

/** A terminal: ``send`` types, ``onData`` gets the screen's bytes, ``exited`` resolves with the end's reason. */
export class Pty {
  constructor(ws) {
    this.ws = ws;
    this.listeners = [];
    this.reason = "";
    this.exited = new Promise((resolve, reject) => {
      ws.addEventListener("close", (e) => {
        this.reason = e.reason;
        if (e.code === 1000) resolve(e.reason);
        else reject(new SandboxError(502, `the terminal closed: ${e.reason || e.code}`));
      });
    });
    this.exited.catch(() => {});
    ws.addEventListener("message", (e) => {
      const bytes = typeof e.data === "string" ? new TextEncoder().encode(e.data) : new Uint8Array(e.data);
      for (const f of this.listeners) f(bytes);
    });
  }

  static open(url) {
    if (typeof WebSocket === "undefined") {
      throw new Error("this Node has no WebSocket: use Node >= 22, or run Node 20 with --experimental-websocket");
    }
    const ws = new WebSocket(url, ["binary"]);
    ws.binaryType = "arraybuffer";
    return new Promise((resolve, reject) => {
      ws.addEventListener("open", () => resolve(new Pty(ws)), { once: true });
      ws.addEventListener("error", () => reject(new SandboxError(502, "the terminal socket was refused")), { once: true });
    });
  }

  onData(f) {
    this.listeners.push(f);
  }

  send(data) {
    this.ws.send(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  resize(cols, rows) {
    this.ws.send(JSON.stringify({ resize: { cols, rows } }));
  }

  close() {
    this.ws.close(1000);
  }
}

/** A leased sandbox: ``await Sandbox.create()``. */
export class Sandbox {
  constructor(info, http) {
    this.info = info;
    this.http = http;
    this.commands = new Commands(this);
    this.files = new Files(this);
    const op = (name, body) => this.http.json("POST", `/v1/sandbox/${name}`, { json: { id: this.id, ...body } });
    /** The typed ops (the MCP tools' HTTP door): answers as the API sends them. */
    this.ops = {
      run: (cmd, { stdin, timeoutSec } = {}) => op("run", { ...(Array.isArray(cmd) ? { argv: cmd } : { command: cmd }), ...(stdin !== undefined && { stdin }), ...(timeoutSec && { timeoutSec }) }),
      read: (path = "") => op("read", { path }),
      write: (path, text) => op("write", { path, data: text }),
    };
    this.pty = {
      /** A login shell, or the tmux session ``session`` (which outlives the connection). */
      create: async ({ session } = {}) => {
        const t = await this.http.json("POST", `/v1/sandbox/${this.id}/terminal/ticket`);
        const u = new URL(this.http.apiUrl);
        u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
        u.pathname = u.pathname.replace(/\/$/, "") + `/v1/sandbox/${this.id}/terminal/ws`;
        u.search = new URLSearchParams(session ? { ticket: t.ticket, arg: session } : { ticket: t.ticket }).toString();
        return Pty.open(u.toString());
      },
    };
  }

  get id() {
    return this.info.id;
  }

  /** Lease a sandbox; ``timeoutSec`` is the lease (default: the class's); ``network`` its egress policy. */
  static async create({ class: klass, project, image, timeoutSec, metadata, network, ...opts } = {}) {
    const http = new HTTP(opts);
    const body = {};
    if (metadata) body.metadata = metadata;
    if (network) body.network = networkBody(network);
    if (klass) body.class = klass;
    if (project) body.project = project;
    if (image) body.image = image;
    if (timeoutSec) body.ttlSec = timeoutSec;
    return new Sandbox(await http.json("POST", "/v1/sandbox", { json: body }), http);
  }

  /** A handle on one of the org's sandboxes. */
  static async connect(id, opts = {}) {
    const http = new HTTP(opts);
    return new Sandbox(await http.json("GET", `/v1/sandbox/${encodeURIComponent(id)}`), http);
  }

  /** Every sandbox of the org, newest first. */
  static async list({ metadata, ...opts } = {}) {
    const http = new HTTP(opts);
    const out = [];
    let cursor;
    const labels = Object.fromEntries(Object.entries(metadata ?? {}).map(([k, v]) => [`metadata.${k}`, v]));
    do {
      const page = await http.json("GET", "/v1/sandbox", { query: { ...labels, cursor } });
      out.push(...page.sandboxes);
      cursor = page.next;
    } while (cursor);
    return out;
  }

  async refresh() {
    return (this.info = await this.http.json("GET", `/v1/sandbox/${this.id}`));
  }

  /** Extend the lease to ``seconds`` from now (never past the ceiling). */
  async setTimeout(seconds) {
    this.info = await this.http.json("POST", `/v1/sandbox/${this.id}/renew`, { json: { ttlSec: seconds } });
  }

  /** Sleep now: the memory is kept where the backend can checkpoint (info.memoryKept says). */
  async sleep() {
    this.info = await this.http.json("POST", `/v1/sandbox/${this.id}/sleep`);
  }

  /** Wake now (any command, file call or renew wakes a sleeping sandbox too). */
  async wake() {
    this.info = await this.http.json("POST", `/v1/sandbox/${this.id}/wake`);
  }

  /** @deprecated sleep()'s old name. */
  async pause() {
    return this.sleep();
  }

  /** @deprecated wake()'s old name. */
  async resume() {
    return this.wake();
  }

  /**
   * Replace the egress policy ({} closes it): new connections follow it at once, open ones it refuses are
   * cut. A sandbox leased with no network cannot be opened (409).
   */
  async setNetwork(policy) {
    this.info = await this.http.json("PUT", `/v1/sandbox/${this.id}/network`, { json: networkBody(policy) });
  }

  /**
   * The host-form URL of ``port``'s preview (http://{port}-{id}.{domain}/, the app at /) with a link token a
   * browser can open, good for ``timeoutSec`` (default an hour, never past the lease).
   */
  async getHost(port, { timeoutSec } = {}) {
    const body = timeoutSec ? { ttlSec: timeoutSec } : {};
    return (await this.http.json("POST", `/v1/sandbox/${this.id}/ports/${Number(port)}/link`, { json: body })).url;
  }

  /**
   * Open a code context: a Jupyter kernel (python or r), javascript or bash, whose variables, imports and working directory
   * persist between runs; its kernel is ready when this resolves.
   */
  async createCodeContext({ language = "python", cwd, envs } = {}) {
    const body = { language };
    if (cwd) body.cwd = cwd;
    if (envs) body.env = envs;
    return this.http.json("POST", `/v1/sandbox/${this.id}/contexts`, { json: body });
  }

  /** The sandbox's code contexts, oldest first. */
  async listCodeContexts() {
    return (await this.http.json("GET", `/v1/sandbox/${this.id}/contexts`)).contexts;
  }

  /** End a code context and its kernel. */
  async removeCodeContext(context) {
    await this.http.json("DELETE", `/v1/sandbox/${this.id}/contexts/${encodeURIComponent(context.id ?? context)}`);
  }

  /** Interrupt the context's run; its state stays. */
  async interruptCodeContext(context) {
    await this.http.json("POST", `/v1/sandbox/${this.id}/contexts/${encodeURIComponent(context.id ?? context)}/interrupt`);
  }

  /**
   * Run code in ``context``, or in ``language``'s default context (python unless said; opened on first use):
   * its results (a MIME bundle each, isMainResult for the last expression's value), logs and error. Past
   * ``timeoutSec`` the kernel is interrupted and the state kept. With a callback the run streams.
   */
  async runCode(code, { context, language, timeoutSec, onStdout, onStderr, onResult, onError } = {}) {
    const ctx = context?.id ?? context ?? (language ?? "python").toLowerCase();
    const path = `/v1/sandbox/${this.id}/contexts/${encodeURIComponent(ctx)}/run`;
    const body = { code };
    if (timeoutSec) body.timeoutSec = timeoutSec;
    if (!(onStdout || onStderr || onResult || onError)) return this.http.json("POST", path, { json: body });
    const res = await this.http.request("POST", path, { json: body, headers: { accept: "application/x-ndjson" } });
    const ex = { results: [], logs: { stdout: [], stderr: [] } };
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const ev = JSON.parse(buf.slice(0, i));
        buf = buf.slice(i + 1);
        switch (ev.type) {
          case "stdout":
            ex.logs.stdout.push(ev.text);
            onStdout?.(ev.text);
            break;
          case "stderr":
            ex.logs.stderr.push(ev.text);
            onStderr?.(ev.text);
            break;
          case "result": {
            const r = { data: ev.data, isMainResult: ev.isMainResult ?? false };
            ex.results.push(r);
            onResult?.(r);
            break;
          }
          case "error":
            ex.error = ev.error;
            onError?.(ev.error);
            break;
          case "end":
            ex.executionCount = ev.executionCount;
            ex.timedOut = ev.timedOut ?? false;
            return ex;
        }
      }
    }
    throw new SandboxError(502, "the run's stream ended before its end");
  }

  /** The address of the sandbox's display in a browser (noVNC; a desktop sandbox): a single-use ticket, good for 30 s. */
  async screenUrl() {
    return this.http.apiUrl + (await this.http.json("POST", `/v1/sandbox/${this.id}/screen/ticket`)).url;
  }

  /** Replace the sandbox's metadata ({} clears it). */
  async setMetadata(metadata) {
    this.info = await this.http.json("PUT", `/v1/sandbox/${this.id}/metadata`, { json: metadata });
  }

  /** Its use now: cpuSeconds, memoryBytes, processes (or "unavailable") and the disk of workdir and rootfs. */
  async stats() {
    return this.http.json("GET", `/v1/sandbox/${this.id}/stats`);
  }

  /** Stop every command running in it; how many. */
  async stop() {
    return (await this.http.json("POST", `/v1/sandbox/${this.id}/stop`)).stopped;
  }

  /** Append a note (an event of kind "note") to a session's live log in the org. */
  async narrate(session, text) {
    await this.http.json("POST", `/v1/sessions/${encodeURIComponent(session)}/events`, { json: { text } });
  }

  /** Follow a session's live log: the backlog, then each event as it comes. */
  async *logs(session, { after, signal } = {}) {
    const res = await this.http.request("GET", `/v1/sessions/${encodeURIComponent(session)}/events`, { query: { after }, signal });
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.startsWith("data: ")) yield JSON.parse(line.slice(6));
      }
    }
  }

  /** Start a shell line (or an argv array) in the background; resolves at once with its record. */
  async startProcess(cmd, { stdin, cwd, envs, tty, cols, rows, timeoutSec, session } = {}) {
    const body = Array.isArray(cmd) ? { argv: cmd } : { command: cmd };
    if (stdin !== undefined) body.stdin = stdin;
    if (cwd) body.dir = cwd;
    if (envs) body.env = envs;
    if (tty) body.tty = true;
    if (cols) body.cols = cols;
    if (rows) body.rows = rows;
    if (timeoutSec) body.timeoutSec = timeoutSec;
    if (session) body.session = session;
    return this.http.json("POST", `/v1/sandbox/${this.id}/processes`, { json: body });
  }

  /** Its background processes, running and finished, oldest first. */
  async processes() {
    return (await this.http.json("GET", `/v1/sandbox/${this.id}/processes`)).processes;
  }

  async process(pid) {
    return this.http.json("GET", `/v1/sandbox/${this.id}/processes/${pid}`);
  }

  /**
   * Follow a process's output after the offset ``from`` (0: all that is still kept) until it ends (the
   * last event is "end"). A stream that breaks is resumed after the last event, so each byte comes once.
   */
  async *processOutput(pid, { from = 0, signal } = {}) {
    let last = from;
    let failed = 0;
    for (;;) {
      const stream = new OutputStream(last);
      let err;
      const res = await this.http.request("GET", `/v1/sandbox/${this.id}/processes/${pid}/output`, {
        query: last ? { from: String(last) } : undefined, headers: { accept: "text/event-stream" }, signal,
      });
      try {
        const decoder = new TextDecoder();
        let buf = "";
        for await (const chunk of res.body) {
          buf += decoder.decode(chunk, { stream: true });
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const ev = stream.feed(buf.slice(0, i).replace(/\r$/, ""));
            buf = buf.slice(i + 1);
            if (ev) {
              yield ev;
              if (stream.ended) return;
            }
          }
        }
      } catch (e) {
        if (signal?.aborted || e instanceof SyntaxError) throw e; // given up, or not a stream of ours
        err = e; // the connection broke (fetch's TypeError) or the server said why it ended: resume
      }
      if (stream.last > last) {
        last = stream.last;
        failed = 0;
      } else if (++failed >= STREAM_TRIES) {
        throw new SandboxError(502, `the output stream of process ${pid} broke ${failed} times in a row: ${err?.message ?? "it ended early"}`);
      }
      await new Promise((r) => setTimeout(r, 100 * 2 ** failed));
    }
  }

  /** Write text or bytes to a process's stdin (``eof`` then closes it; a tty process gets ^D); how many bytes. */
  async sendStdin(pid, data, { eof = false } = {}) {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const r = await this.http.json("POST", `/v1/sandbox/${this.id}/processes/${pid}/stdin`, {
      query: eof ? { eof: "1" } : undefined, body, headers: { "content-type": "application/octet-stream" },
    });
    return r.written;
  }

  /** Send a signal (TERM, INT, KILL, HUP, USR1, ... or a number) to a process and its group. */
  async signal(pid, signal = "TERM") {
    return this.http.json("POST", `/v1/sandbox/${this.id}/processes/${pid}/signal`, { json: { signal: String(signal) } });
  }

  /** Set a tty process's terminal size. */
  async resizeProcess(pid, cols, rows) {
    return this.http.json("POST", `/v1/sandbox/${this.id}/processes/${pid}/resize`, { json: { cols, rows } });
  }

  /**
   * A new sandbox that goes on from this one's memory and files at this instant (its processes too) while
   * this one runs on. A project sandbox's fork needs a new ``project``, which gets a copy of the volume.
   */
  async fork({ project, timeoutSec, metadata } = {}) {
    const body = {};
    if (project) body.project = project;
    if (timeoutSec) body.ttlSec = timeoutSec;
    if (metadata) body.metadata = metadata;
    return new Sandbox(await this.http.json("POST", `/v1/sandbox/${this.id}/fork`, { json: body }), this.http);
  }

  /**
   * Save this sandbox's filesystem as the org's image ``name``: what it changed in its root (packages
   * installed) and, with ``workdir``, its workdir. ``Sandbox.create({ image })`` and ``runCode(..., { image })``
   * start from it; memory is not saved (``fork`` copies it).
   */
  async snapshot(name, { workdir = false } = {}) {
    return this.http.json("POST", `/v1/sandbox/${this.id}/snapshot`, { json: workdir ? { name, workdir } : { name } });
  }

  /** End the sandbox (``purge`` drops its project volume too). */
  async kill({ purge = false } = {}) {
    await (await this.http.request("DELETE", `/v1/sandbox/${this.id}`, { query: purge ? { purge: "1" } : undefined })).body?.cancel();
  }

  /** ``await using sbx = await Sandbox.create()`` ends it at the scope's end. */
  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")]() {
    try {
      await this.kill();
    } catch (e) {
      if (!(e instanceof SandboxError)) throw e;
    }
  }
}

/**
 * Run a program in the code interpreter (13 languages); pass ``sessionId`` again to keep its files, or
 * ``image`` (one of ``images()``) to start a new session on it.
 */
export async function runCode(language, code, { sessionId, args, timeoutSec, image, ...opts } = {}) {
  const body = { language, code };
  if (sessionId) body.session_id = sessionId;
  if (args) body.args = args;
  if (timeoutSec) body.timeoutSec = timeoutSec;
  if (image) body.image = image;
  return new HTTP(opts).json("POST", "/v1/exec", { json: body });
}

/**
 * Pull ``ref`` into the org's images as ``name``, from a registry the server allows (else a 403); its bytes
 * count against the org's disk quota. The registry credentials serve this pull only.
 */
export async function pullImage(name, ref, { username, password, ...opts } = {}) {
  const body = { name, ref };
  if (username) body.username = username;
  if (password) body.password = password;
  return new HTTP(opts).json("POST", "/v1/images", { json: body });
}

/** The images the org may start from: its own, the server's, then the class images (`scope: "class"`). */
export async function images(opts = {}) {
  return (await new HTTP(opts).json("GET", "/v1/images")).images;
}

/** Delete one of the org's images (a 409 while a live sandbox runs it). */
export async function deleteImage(name, opts = {}) {
  return new HTTP(opts).json("DELETE", `/v1/images/${encodeURIComponent(name)}`);
}

/** Each quota of the org with its use now. */
export async function quotas(opts = {}) {
  return (await new HTTP(opts).json("GET", "/v1/sandbox/quota")).quotas;
}

/** The org's lease count and lease-seconds, by class. */
export async function usage(opts = {}) {
  return (await new HTTP(opts).json("GET", "/v1/sandbox/usage")).usage;
}

/** The org's project volumes with their size and last use. */
export async function volumes(opts = {}) {
  return (await new HTTP(opts).json("GET", "/v1/volumes")).volumes;
}

/** Delete a project's volume (a 409 while a live sandbox holds it). */
export async function deleteVolume(project, opts = {}) {
  return new HTTP(opts).json("DELETE", `/v1/volumes/${encodeURIComponent(project)}`);
}

/** The server's version, backend and capabilities. */
export async function info(opts = {}) {
  return new HTTP(opts).json("GET", "/v1/info");
}

/** The files of an interpreter session (runCode's session_id). */
export async function sessionFiles(sessionId, opts = {}) {
  return (await new HTTP(opts).json("GET", `/v1/exec/${encodeURIComponent(sessionId)}/files`)).files;
}

/** Upload a file into an interpreter session's workdir (its base name is kept). */
export async function uploadFile(sessionId, name, data, opts = {}) {
  const form = new FormData();
  form.append("file", new Blob([data]), name);
  return (await new HTTP(opts).json("POST", `/v1/exec/${encodeURIComponent(sessionId)}/files`, { body: form })).files;
}

/** A file of an interpreter session, its bytes. */
export async function downloadFile(sessionId, path, opts = {}) {
  const res = await new HTTP(opts).request("GET", `/v1/exec/${encodeURIComponent(sessionId)}/files/${path.split("/").map(encodeURIComponent).join("/")}`);
  return new Uint8Array(await res.arrayBuffer());
}
