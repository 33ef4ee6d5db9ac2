"""What the API answers, as typed values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class SandboxInfo:
    """The Sandbox object. Times are Unix seconds."""

    id: str
    kind: str
    org: str
    class_: str
    status: str
    image: str
    runtime: str
    workdir: str
    created_at: int
    last_used_at: int
    expires_at: int
    project: Optional[str] = None
    volume: Optional[str] = None
    error: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    #: Of a sleeping, just-woken or just-forked sandbox: whether its memory
    #: was kept (False where the backend keeps files only, as on Kubernetes);
    #: None otherwise.
    memory_kept: Optional[bool] = None
    #: The egress policy it got ({"allow": [...], "deny": [...], "ports": [...]}); None: no network.
    network: Optional[Dict[str, Any]] = None

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"], kind=d["kind"], org=d["org"], class_=d["class"], status=d["status"], image=d["image"],
            runtime=d["runtime"], workdir=d["workdir"], created_at=d["createdAt"], last_used_at=d["lastUsedAt"],
            expires_at=d["expiresAt"], project=d.get("project"), volume=d.get("volume"), error=d.get("error"),
            metadata=d.get("metadata") or {}, memory_kept=d.get("memoryKept"), network=d.get("network"),
        )


@dataclass
class CommandResult:
    """A finished command; a non-zero exit is a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    stopped: bool = False

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "CommandResult":
        return cls(d["exitCode"], d["stdout"], d["stderr"], d.get("timedOut", False), d.get("stopped", False))


@dataclass
class RunCodeResult:
    """A finished interpreter run; ``files`` are those it created or changed."""

    session_id: str
    exit_code: int
    stdout: str
    stderr: str
    files: List[Dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "RunCodeResult":
        return cls(d["session_id"], d["exitCode"], d["stdout"], d["stderr"], d.get("files") or [], d.get("timedOut", False))


@dataclass
class Event:
    """One entry of a session's live log."""

    seq: int
    kind: str
    text: str
    at: str


@dataclass
class ProcessInfo:
    """A background process's record. Times are Unix seconds; ``status`` is
    running, exited or lost (the sandbox started again without its memory)."""

    pid: int
    argv: List[str]
    dir: str
    status: str
    started_at: int
    ended_at: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    timed_out: bool = False
    output_bytes: int = 0
    dropped_bytes: int = 0
    stdin_open: bool = False
    tty: bool = False
    session: Optional[str] = None

    @property
    def running(self) -> bool:
        return self.status == "running"

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "ProcessInfo":
        return cls(
            pid=d["pid"], argv=d.get("argv") or [], dir=d.get("dir", ""), status=d["status"], started_at=d["startedAt"],
            ended_at=d.get("endedAt"), exit_code=d.get("exitCode"), signal=d.get("signal"), timed_out=d.get("timedOut", False),
            output_bytes=d.get("outputBytes", 0), dropped_bytes=d.get("droppedBytes", 0), stdin_open=d.get("stdinOpen", False),
            tty=d.get("tty", False), session=d.get("session"),
        )


@dataclass
class ProcessEvent:
    """One piece of a process's output: ``stdout``/``stderr`` (``data``),
    ``dropped`` (``dropped_bytes`` before ``offset`` are no longer kept) or
    ``end`` (``process``). ``offset`` is where it ends in all the process
    wrote: pass it as ``from_`` to read on after it."""

    kind: str
    offset: int
    data: bytes = b""
    dropped_bytes: int = 0
    process: Optional[ProcessInfo] = None


@dataclass
class ImageInfo:
    """An image the org may start from. Its time is Unix seconds; ``scope`` is org (the org's own: pulled
    or a snapshot) or server (the operator's), both leased with ``Sandbox.create(image=name)`` or
    ``run_code(image=name)``, or class: a class image, leased with ``Sandbox.create(image.class_)``,
    ``holds`` saying what is in it (a class image has no digest)."""

    name: str
    digest: str
    source: str
    size_bytes: int
    scope: str
    created_at: int
    class_: str = ""
    holds: str = ""

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "ImageInfo":
        return cls(d["name"], d["digest"], d["source"], d["sizeBytes"], d["scope"], d["createdAt"],
                   d.get("class", ""), d.get("holds", ""))


def pull_body(name: str, ref: str, username: Optional[str], password: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"name": name, "ref": ref}
    if username:
        body["username"] = username
    if password:
        body["password"] = password
    return body


def snapshot_body(name: str, workdir: bool) -> Dict[str, Any]:
    return {"name": name, "workdir": True} if workdir else {"name": name}


def run_code_body(language: str, code: str, session_id: Optional[str], args: Optional[List[str]],
                  timeout: Optional[float], image: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"language": language, "code": code}
    if session_id:
        body["session_id"] = session_id
    if args:
        body["args"] = args
    if timeout:
        body["timeoutSec"] = int(timeout)
    if image:
        body["image"] = image
    return body


def process_body(cmd: Any, stdin: Optional[str], cwd: Optional[str], envs: Optional[Dict[str, str]], tty: bool,
                 cols: Optional[int], rows: Optional[int], timeout: Optional[float], session: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"argv": list(cmd)} if isinstance(cmd, (list, tuple)) else {"command": cmd}
    if stdin is not None:
        body["stdin"] = stdin
    if cwd:
        body["dir"] = cwd
    if envs:
        body["env"] = envs
    if tty:
        body["tty"] = True
    if cols:
        body["cols"] = cols
    if rows:
        body["rows"] = rows
    if timeout:
        body["timeoutSec"] = max(1, int(timeout))
    if session:
        body["session"] = session
    return body


def fork_body(project: Optional[str], timeout: Optional[float], metadata: Optional[Dict[str, str]]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if project:
        body["project"] = project
    if timeout:
        body["ttlSec"] = int(timeout)
    if metadata is not None:
        body["metadata"] = metadata
    return body


class OutputStream:
    """Parses a process's output stream, line by line (``feed``), into
    ProcessEvents; ``last`` is the offset after the last one, where a broken
    stream resumes, and ``ended`` says the end came."""

    def __init__(self, start: int):
        self.last = start
        self.ended = False
        self._id = self._event = None
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[ProcessEvent]:
        import base64
        import json

        line = line.rstrip("\r\n")  # httpx before 0.24 keeps the line's end
        if line:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "id":
                self._id = value
            elif field == "event":
                self._event = value
            elif field == "data":
                self._data.append(value)
            return None
        kind, data, ev_id = self._event, "\n".join(self._data), self._id
        self._id = self._event = None
        self._data = []
        if not kind:
            return None  # a comment (: ping) or the retry hint
        if kind == "error":
            raise StreamBroken(json.loads(data).get("error", data))
        if kind not in ("stdout", "stderr", "dropped", "end"):
            return None
        d = json.loads(data)
        ev = ProcessEvent(kind, int(ev_id))
        if kind in ("stdout", "stderr"):
            ev.data = base64.b64decode(d[kind + "Base64"]) if kind + "Base64" in d else d.get(kind, "").encode()
        elif kind == "dropped":
            ev.dropped_bytes = d["droppedBytes"]
        else:
            ev.process = ProcessInfo.of(d)
            self.ended = True
        self.last = ev.offset
        return ev


class StreamBroken(Exception):
    """The output stream ended before the process did; it is resumed."""


def exec_body(cmd: Any, stdin: Optional[str], cwd: Optional[str], timeout: Optional[float],
              env: Optional[Dict[str, str]], session: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"argv": list(cmd)} if isinstance(cmd, (list, tuple)) else {"command": cmd}
    if stdin is not None:
        body["stdin"] = stdin
    if cwd:
        body["dir"] = cwd
    if timeout:
        body["timeoutSec"] = max(1, int(timeout))
    if env:
        body["env"] = env
    if session:
        body["session"] = session
    return body


def network_body(policy: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """An egress policy as the API takes it: ``allow``, ``deny`` (lists of "internet", domains,
    ``*.domain``, IPv4 addresses or CIDRs) and ``ports``; ``None`` or ``{}`` is no network."""
    policy = dict(policy or {})
    unknown = set(policy) - {"allow", "deny", "ports"}
    if unknown:
        raise ValueError(f"network policy: unknown keys {sorted(unknown)} (allow, deny, ports)")
    return {k: list(v) for k, v in policy.items() if v}


def lease_body(class_: Optional[str], project: Optional[str], image: Optional[str], timeout: Optional[float],
               network: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if class_:
        body["class"] = class_
    if project:
        body["project"] = project
    if image:
        body["image"] = image
    if timeout:
        body["ttlSec"] = int(timeout)
    if network is not None:
        body["network"] = network_body(network)
    return body


def parse_sse(lines):
    """Yield events from an iterable of SSE lines."""
    import json

    for line in lines:
        if line.startswith("data: "):
            d = json.loads(line[6:])
            yield Event(d["seq"], d["kind"], d["text"], d["at"])


@dataclass
class CodeContext:
    """A code context: a Jupyter kernel that keeps its state between runs."""

    id: str
    language: str
    cwd: str
    created_at: int = 0
    busy: bool = False

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "CodeContext":
        return cls(d["id"], d["language"], d["cwd"], d.get("createdAt", 0), d.get("busy", False))


@dataclass
class Result:
    """One rich result of a run (E2B's names): each format the kernel gave,
    ``png``/``jpeg`` as base64; ``is_main_result`` for the last expression's value."""

    raw: Dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False

    text = property(lambda self: self.raw.get("text/plain"))
    html = property(lambda self: self.raw.get("text/html"))
    markdown = property(lambda self: self.raw.get("text/markdown"))
    latex = property(lambda self: self.raw.get("text/latex"))
    png = property(lambda self: self.raw.get("image/png"))
    jpeg = property(lambda self: self.raw.get("image/jpeg"))
    svg = property(lambda self: self.raw.get("image/svg+xml"))
    json = property(lambda self: self.raw.get("application/json"))
    javascript = property(lambda self: self.raw.get("application/javascript"))

    def formats(self) -> List[str]:
        return list(self.raw)

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "Result":
        return cls(d.get("data") or {}, d.get("isMainResult", False))


@dataclass
class ExecutionError:
    """A run's error: its exception's name, value and traceback."""

    name: str
    value: str
    traceback: List[str] = field(default_factory=list)

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "ExecutionError":
        return cls(d.get("name", ""), d.get("value", ""), d.get("traceback") or [])


@dataclass
class Logs:
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """A run in a code context: its results, its output as it came, and its error (None when it ran through)."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    timed_out: bool = False

    @property
    def text(self) -> Optional[str]:
        """The text of the main result (the last expression's value), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "Execution":
        logs = d.get("logs") or {}
        return cls([Result.of(r) for r in d.get("results") or []], Logs(logs.get("stdout") or [], logs.get("stderr") or []),
                   ExecutionError.of(d["error"]) if d.get("error") else None, d.get("executionCount"), d.get("timedOut", False))

    def add(self, ev: Dict[str, Any], on_stdout=None, on_stderr=None, on_result=None, on_error=None) -> bool:
        """Fold one streamed event in (calling its callback); True at the end."""
        t = ev.get("type")
        if t == "stdout":
            self.logs.stdout.append(ev.get("text", ""))
            if on_stdout:
                on_stdout(ev.get("text", ""))
        elif t == "stderr":
            self.logs.stderr.append(ev.get("text", ""))
            if on_stderr:
                on_stderr(ev.get("text", ""))
        elif t == "result":
            r = Result.of(ev)
            self.results.append(r)
            if on_result:
                on_result(r)
        elif t == "error":
            self.error = ExecutionError.of(ev.get("error") or {})
            if on_error:
                on_error(self.error)
        elif t == "end":
            self.execution_count, self.timed_out = ev.get("executionCount"), ev.get("timedOut", False)
            return True
        return False


def context_body(language: str, cwd: Optional[str], envs: Optional[Dict[str, str]]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"language": language}
    if cwd:
        body["cwd"] = cwd
    if envs:
        body["env"] = envs
    return body


def context_id(context: Any, language: Optional[str]) -> str:
    """The context a run goes to: a context (or its id), else the language's default one."""
    if context is not None:
        return context.id if isinstance(context, CodeContext) else str(context)
    return (language or "python").lower()


@dataclass
class FilesystemEvent:
    """A change under a watched directory: ``type`` is created, written, removed, renamed, or overflow
    (changes were missed); ``name`` the path under the directory."""

    type: str
    name: str = ""


class WatchCursor:
    """A directory watch's place in its event stream, shared by the sync and async handles: it reads the
    stream's lines into events, keeps the id of the last one for ``Last-Event-ID`` when the stream is opened
    again, drops a resumed stream's second ``ready``, and counts breaks that brought nothing new."""

    def __init__(self) -> None:
        self.last, self._id, self._ready, self._stuck = "", "", False, 0

    def headers(self) -> Dict[str, str]:
        """The headers of a (re)opened stream; it starts without an id of its own."""
        self._id = ""
        h = {"Accept": "text/event-stream"}
        if self.last:
            h["Last-Event-ID"] = self.last
        return h

    def feed(self, line: str) -> Optional[FilesystemEvent]:
        """The event a line completes, or None."""
        if line.startswith("id: "):
            self._id = line[4:].strip()
            return None
        if not line.startswith("data: "):
            return None
        d = json.loads(line[6:])
        self.last = self._id
        if d.get("type") == "ready":
            if self._ready:
                return None  # a resumed stream's
            self._ready = True
        self._stuck = 0
        return FilesystemEvent(d.get("type", ""), d.get("name", ""))

    def broke(self) -> float:
        """A stream broke: the seconds to wait before opening it again, or an error after 5 breaks in a row
        with no event between them."""
        from ._errors import SandboxError

        self._stuck += 1
        if self._stuck >= 5:
            raise SandboxError(502, "the watch's stream broke 5 times in a row")
        return 0.1 * 2 ** self._stuck
