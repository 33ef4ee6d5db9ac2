// Types of @sandboxd/sdk (the implementation is index.mjs).

/** Where the server is: default SANDBOX_URL and SANDBOX_KEY. */
export interface ClientOptions {
  apiUrl?: string;
  apiKey?: string;
  /** How often a call refused with Retry-After is tried again (default 3). */
  retries?: number;
  maxWaitMs?: number;
}

/** The Sandbox object; times are Unix seconds. */
export interface SandboxInfo {
  id: string;
  kind: "sandbox";
  org: string;
  class: string;
  project?: string;
  status: "pending" | "running" | "sleeping" | "error";
  image: string;
  runtime: string;
  volume?: string;
  workdir: string;
  createdAt: number;
  lastUsedAt: number;
  expiresAt: number;
  error?: string;
  woken?: boolean;
  memoryKept?: boolean;
  metadata?: Record<string, string>;
  /** The egress policy it got; absent: no network. */
  network?: NetworkPolicy;
}

/**
 * An egress policy: what a sandbox may reach. allow: "internet" (every public address), a domain
 * ("pypi.org"), its subdomains ("*.github.com"), an IPv4 address or CIDR; deny: the same forms but
 * "internet", refused even where allow covers them; ports: the destination ports (none: any).
 */
export interface NetworkPolicy {
  allow?: string[];
  deny?: string[];
  ports?: number[];
}

export interface CommandResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut?: boolean;
  stopped?: boolean;
  woken?: boolean;
}

export interface RunOptions {
  stdin?: string;
  cwd?: string;
  timeoutSec?: number;
  envs?: Record<string, string>;
  /** Narrate the output into this session's live log. */
  session?: string;
}

export interface Event {
  seq: number;
  kind: "start" | "stdout" | "stderr" | "exit" | "error" | "truncated";
  text: string;
  at: string;
}

export interface RunCodeResult {
  session_id: string;
  newSession?: boolean;
  exitCode: number;
  stdout: string;
  stderr: string;
  files: { path: string; size: number }[];
  timedOut?: boolean;
  stopped?: boolean;
}

/** A background process's record; times are Unix seconds. */
export interface ProcessInfo {
  pid: number;
  argv: string[];
  dir: string;
  tty?: boolean;
  session?: string;
  /** lost: the sandbox started again without its memory, the end is unknown. */
  status: "running" | "exited" | "lost";
  startedAt: number;
  endedAt?: number;
  exitCode?: number;
  /** What killed it, e.g. "SIGTERM". */
  signal?: string;
  timedOut?: boolean;
  outputBytes: number;
  droppedBytes: number;
  stdinOpen?: boolean;
}

export interface ProcessOptions {
  stdin?: string;
  cwd?: string;
  envs?: Record<string, string>;
  /** On a terminal: stderr merged into stdout, resizable. */
  tty?: boolean;
  cols?: number;
  rows?: number;
  /** Killed after this long (exit 124); default: it runs until it ends, is signalled or the sandbox ends. */
  timeoutSec?: number;
  session?: string;
}

/** One piece of a process's output; offset is where it ends in all the process wrote (pass it as from). */
export interface ProcessEvent {
  kind: "stdout" | "stderr" | "dropped" | "end";
  offset: number;
  /** stdout, stderr: the bytes. */
  data: Uint8Array;
  /** dropped: output before offset no longer kept. */
  droppedBytes?: number;
  /** end: the process's record. */
  process?: ProcessInfo;
}

/** An image the org may lease (``Sandbox.create({ image: name })``); its time is Unix seconds. */
export interface ImageInfo {
  name: string;
  digest: string;
  /** The reference it was pulled from, "snapshot of sb_…", or how a class image was built. */
  source: string;
  sizeBytes: number;
  /**
   * org: the org's own (pulled or a snapshot); server: the operator's, offered to every org (both
   * leased with `{ image: name }`); class: a class image (leased with `{ class: image.class }`).
   */
  scope: "org" | "server" | "class";
  createdAt: number;
  /** A class image's class. */
  class?: string;
  /** What a class image holds. */
  holds?: string;
}

export interface ForkOptions {
  /** A project sandbox's fork needs a new project, which gets a copy of the volume. */
  project?: string;
  /** The fork's lease in seconds; default the class's. */
  timeoutSec?: number;
  /** Default: the original's. */
  metadata?: Record<string, string>;
}

/** A refusal of the server: its status and message, unchanged. */
export class SandboxError extends Error {
  status: number;
  message: string;
  retryAfter?: number;
}

export class Pty {
  /** The server's word on the end, e.g. "the shell exited (0)". */
  reason: string;
  /** Resolves with the reason once the shell has ended. */
  exited: Promise<string>;
  onData(f: (bytes: Uint8Array) => void): void;
  send(data: string | Uint8Array): void;
  resize(cols: number, rows: number): void;
  close(): void;
}

export interface LeaseOptions extends ClientOptions {
  /** Labels of the caller's, on every answer and filtered by in list(). */
  metadata?: Record<string, string>;
  /** exec (the default), dev, desktop or android. */
  class?: string;
  /** The project whose volume is mounted; required for every class but exec. */
  project?: string;
  image?: string;
  /** The lease in seconds; default the class's. */
  timeoutSec?: number;
  /** Its egress policy (default: no network; the operator's --network-allow bounds it). */
  network?: NetworkPolicy;
}

export class Sandbox {
  readonly info: SandboxInfo;
  readonly id: string;
  commands: {
    run(cmd: string | string[], opts?: RunOptions): Promise<CommandResult>;
    /** Output as it is written; resolves with the exit (stdout and stderr empty). */
    stream(cmd: string | string[], opts?: { onStdout?: (b: Uint8Array) => void; onStderr?: (b: Uint8Array) => void; stdin?: string; timeoutSec?: number }): Promise<CommandResult>;
  };
  files: {
    read(path: string): Promise<Uint8Array>;
    readText(path: string): Promise<string>;
    write(path: string, data: string | Uint8Array): Promise<number>;
    list(path?: string): Promise<string[]>;
    archive(path?: string, opts?: { gzip?: boolean }): Promise<Uint8Array>;
    extract(path: string, data: Uint8Array): Promise<{ path: string; entries: number; bytes: number }>;
    /** Watch a directory: onEvent gets each change until stop(); resolves once the watch is in place. A stream
     * that breaks is resumed after the last event (the server keeps the watch 30 s): the changes of meanwhile come
     * first, or an "overflow" event where some were lost. */
    watchDir(path: string, onEvent: (e: FilesystemEvent) => void, opts?: { recursive?: boolean }): Promise<{ stop(): void }>;
  };
  pty: { create(opts?: { session?: string }): Promise<Pty> };
  /** The typed ops (the MCP tools' HTTP door). */
  ops: {
    run(cmd: string | string[], opts?: { stdin?: string; timeoutSec?: number }): Promise<CommandResult>;
    read(path?: string): Promise<{ path: string; kind: "file" | "directory"; dir: boolean; size?: number; data?: string; dataBase64?: string; entries?: string[] }>;
    write(path: string, text: string): Promise<{ path: string; bytes: number }>;
  };

  static create(opts?: LeaseOptions): Promise<Sandbox>;
  static connect(id: string, opts?: ClientOptions): Promise<Sandbox>;
  static list(opts?: ClientOptions & { metadata?: Record<string, string> }): Promise<SandboxInfo[]>;

  refresh(): Promise<SandboxInfo>;
  setTimeout(seconds: number): Promise<void>;
  /** Sleep now: the memory is kept where the backend can checkpoint (info.memoryKept says). */
  sleep(): Promise<void>;
  /** Wake now. */
  wake(): Promise<void>;
  /** @deprecated sleep()'s old name. */
  pause(): Promise<void>;
  /** @deprecated wake()'s old name. */
  resume(): Promise<void>;
  stop(): Promise<number>;
  setMetadata(metadata: Record<string, string>): Promise<void>;
  /** Replace the egress policy ({} closes it); a sandbox leased with no network cannot be opened (409). */
  setNetwork(policy: NetworkPolicy): Promise<void>;
  /** The host-form URL of port's preview with a link token a browser can open. */
  getHost(port: number, opts?: { timeoutSec?: number }): Promise<string>;
  /** The address of the sandbox's display in a browser (noVNC): a single-use ticket, good for 30 s. */
  screenUrl(): Promise<string>;
  /** Open a code context (python or r on Jupyter kernels, javascript, bash) that keeps its state between runs. */
  createCodeContext(opts?: { language?: "python" | "py" | "r" | "javascript" | "js" | "bash"; cwd?: string; envs?: Record<string, string> }): Promise<CodeContext>;
  listCodeContexts(): Promise<CodeContext[]>;
  removeCodeContext(context: CodeContext | string): Promise<void>;
  /** Interrupt the context's run; its state stays. */
  interruptCodeContext(context: CodeContext | string): Promise<void>;
  /** Run code in a context (or the language's default one, python unless said). */
  runCode(code: string, opts?: {
    context?: CodeContext | string; language?: string; timeoutSec?: number;
    onStdout?: (text: string) => void; onStderr?: (text: string) => void;
    onResult?: (r: Result) => void; onError?: (e: ExecutionError) => void;
  }): Promise<Execution>;
  stats(): Promise<{ id: string; cpuSeconds?: number; memoryBytes?: number; processes?: number; unavailable?: string; disk: { path: string; usedBytes: number; sizeBytes: number }[] }>;
  /** Append a note (an event of kind "note") to a session's live log in the org. */
  narrate(session: string, text: string): Promise<void>;
  logs(session: string, opts?: { after?: number; signal?: AbortSignal }): AsyncGenerator<Event>;
  /** Start a background process; resolves at once (it runs on, its output kept: the last 1 MiB). */
  startProcess(cmd: string | string[], opts?: ProcessOptions): Promise<ProcessInfo>;
  processes(): Promise<ProcessInfo[]>;
  process(pid: number): Promise<ProcessInfo>;
  /** Its output after from (0: all that is kept) to its end; a broken stream is resumed after the last event. */
  processOutput(pid: number, opts?: { from?: number; signal?: AbortSignal }): AsyncGenerator<ProcessEvent>;
  /** Write to its stdin (eof then closes it); the bytes written. */
  sendStdin(pid: number, data: string | Uint8Array, opts?: { eof?: boolean }): Promise<number>;
  /** Signal it and its group (default TERM). */
  signal(pid: number, signal?: string | number): Promise<ProcessInfo>;
  resizeProcess(pid: number, cols: number, rows: number): Promise<ProcessInfo>;
  /** A new sandbox going on from this one's memory and files (its processes too) while this one runs on. */
  fork(opts?: ForkOptions): Promise<Sandbox>;
  /** Save its filesystem (its root's changes; with workdir, its workdir too) as the org's image name. */
  snapshot(name: string, opts?: { workdir?: boolean }): Promise<ImageInfo>;
  kill(opts?: { purge?: boolean }): Promise<void>;
}

export function runCode(
  language: string,
  code: string,
  opts?: ClientOptions & { sessionId?: string; args?: string[]; timeoutSec?: number; image?: string },
): Promise<RunCodeResult>;

/** Pull ref into the org's images as name, from a registry the server allows; the credentials serve this pull only. */
export function pullImage(name: string, ref: string, opts?: ClientOptions & { username?: string; password?: string }): Promise<ImageInfo>;
/** The images the org may start from: its own, the server's, then the class images (`scope: "class"`). */
export function images(opts?: ClientOptions): Promise<ImageInfo[]>;
/** Delete one of the org's images (a 409 while a live sandbox runs it). */
export function deleteImage(name: string, opts?: ClientOptions): Promise<ImageInfo>;

/** A code context: a Jupyter kernel in the sandbox. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
  createdAt: number;
  busy?: boolean;
}

/** One rich result: a MIME bundle (image/png and image/jpeg as base64). */
export interface Result {
  data: { "text/plain"?: string; "text/html"?: string; "text/markdown"?: string; "text/latex"?: string; "image/png"?: string; "image/jpeg"?: string; "image/svg+xml"?: string; "application/json"?: unknown; [mime: string]: unknown };
  isMainResult?: boolean;
}

export interface ExecutionError {
  name: string;
  value: string;
  traceback: string[];
}

/** A run in a code context. */
export interface Execution {
  results: Result[];
  logs: { stdout: string[]; stderr: string[] };
  error?: ExecutionError;
  executionCount?: number;
  timedOut?: boolean;
}

/** A change under a watched directory. */
export interface FilesystemEvent {
  type: "created" | "written" | "removed" | "renamed" | "overflow";
  name: string;
}

/** Each quota of the org with its use now. */
export function quotas(opts?: ClientOptions): Promise<{ name: string; limit: number; used: number; [k: string]: unknown }[]>;
/** The org's lease count and lease-seconds, by class. */
export function usage(opts?: ClientOptions): Promise<{ class: string; leases: number; leaseSeconds: number; [k: string]: unknown }[]>;
/** The org's project volumes. */
export function volumes(opts?: ClientOptions): Promise<{ project: string; sizeBytes: number; [k: string]: unknown }[]>;
/** Delete a project's volume (a 409 while a live sandbox holds it). */
export function deleteVolume(project: string, opts?: ClientOptions): Promise<unknown>;
/** The server's version, backend and capabilities. */
export function info(opts?: ClientOptions): Promise<{ version: string; backend: string; capabilities: string[] }>;
/** The files of an interpreter session. */
export function sessionFiles(sessionId: string, opts?: ClientOptions): Promise<{ path: string; size: number }[]>;
/** Upload a file into an interpreter session's workdir. */
export function uploadFile(sessionId: string, name: string, data: string | Uint8Array, opts?: ClientOptions): Promise<{ path: string; size: number }[]>;
/** A file of an interpreter session, its bytes. */
export function downloadFile(sessionId: string, path: string, opts?: ClientOptions): Promise<Uint8Array>;
