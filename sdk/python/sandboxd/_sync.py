"""The synchronous client."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Union

import httpx

from ._transport import sync_transport
from ._errors import SandboxError, refusal, should_retry
from ._models import (CodeContext, Execution, FilesystemEvent, WatchCursor, context_body, context_id)
from ._models import (CommandResult, Event, ImageInfo, OutputStream, ProcessEvent, ProcessInfo, RunCodeResult, SandboxInfo, StreamBroken,
                      exec_body, fork_body, lease_body, network_body, parse_sse, process_body, pull_body, run_code_body, snapshot_body)

#: How often in a row a process's output stream may break with nothing new
#: before process_output gives up.
STREAM_TRIES = 5


def _config(api_url: Optional[str], api_key: Optional[str]):
    url = (api_url or os.environ.get("SANDBOX_URL") or "").rstrip("/")
    key = api_key or os.environ.get("SANDBOX_KEY") or ""
    if not url or not key:
        raise ValueError("no server or key: pass api_url= and api_key=, or set SANDBOX_URL and SANDBOX_KEY")
    return url, key


class _HTTP:
    """One server and key: every call, with the bounded retry."""

    def __init__(self, api_url: Optional[str], api_key: Optional[str], retries: int = 3, max_wait: float = 30.0):
        self.url, self.key = _config(api_url, api_key)
        self.retries, self.max_wait = retries, max_wait
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": "Bearer " + self.key},
                                 timeout=httpx.Timeout(660.0, connect=10.0), transport=sync_transport())

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        attempt = 0
        while True:
            res = self.client.request(method, path, **kw)
            if res.status_code < 400:
                return res
            err = refusal(res)
            if not should_retry(method, err, attempt, self.retries) or "content" in kw:
                raise err
            time.sleep(min(err.retry_after or 1, self.max_wait))
            attempt += 1

    def json(self, method: str, path: str, **kw) -> Any:
        return self.request(method, path, **kw).json()


_pool: Dict[tuple, _HTTP] = {}
_pool_lock = threading.Lock()


def _shared(api_url: Optional[str], api_key: Optional[str]) -> _HTTP:
    """One connection pool per server and key for the process: a new
    httpx.Client per sandbox would open a new connection (and build an SSL
    context) for every lease."""
    url, key = _config(api_url, api_key)
    with _pool_lock:
        h = _pool.get((url, key))
        if h is None:
            h = _pool[(url, key)] = _HTTP(url, key)
        return h


class Commands:
    """``sbx.commands``: run a command and wait for it."""

    def __init__(self, sbx: "Sandbox"):
        self._sbx = sbx

    def run(self, cmd: Union[str, List[str]], *, stdin: Optional[str] = None, cwd: Optional[str] = None,
            timeout: Optional[float] = None, envs: Optional[Dict[str, str]] = None, session: Optional[str] = None) -> CommandResult:
        """Run ``cmd`` (a shell line, or an argv list) and wait; a non-zero exit is a result."""
        d = self._sbx._http.json("POST", f"/v1/sandbox/{self._sbx.id}/exec", json=exec_body(cmd, stdin, cwd, timeout, envs, session))
        return CommandResult.of(d)

    def stream(self, cmd: Union[str, List[str]], *, on_stdout=None, on_stderr=None, stdin: Optional[str] = None,
               cwd: Optional[str] = None, timeout: Optional[float] = None) -> CommandResult:
        """Run ``cmd`` and hand its output to ``on_stdout``/``on_stderr`` (bytes) as it is written; the
        result carries the exit (its stdout and stderr are empty)."""
        import base64
        import json as _json

        body = exec_body(cmd, stdin, cwd, timeout, None, None)
        with self._sbx._http.client.stream("POST", f"/v1/sandbox/{self._sbx.id}/exec", json=body,
                                           headers={"Accept": "application/x-ndjson"}, timeout=None) as res:
            if res.status_code >= 400:
                res.read()
                raise refusal(res)
            for line in res.iter_lines():
                if not line:
                    continue
                d = _json.loads(line)
                if "error" in d:
                    raise SandboxError(502, d["error"])
                if "exitCode" in d:
                    return CommandResult(d["exitCode"], "", "", d.get("timedOut", False), d.get("stopped", False))
                for key, fn in (("stdout", on_stdout), ("stderr", on_stderr)):
                    chunk = d[key].encode() if key in d else base64.b64decode(d[key + "Base64"]) if key + "Base64" in d else None
                    if chunk is not None and fn:
                        fn(chunk)
        raise SandboxError(502, "the exec stream ended before the exit")


class WatchHandle:
    """An open watch (``files.watch_dir``): an iterator of FilesystemEvent, and a context manager. A stream that
    breaks is resumed after the last event (the server keeps the watch 30 s): the changes of meanwhile come
    first, or an ``overflow`` event where some were lost."""

    def __init__(self, sbx: "Sandbox", path: str, recursive: bool):
        self._sbx, self._cursor, self._closed = sbx, WatchCursor(), False
        self._params = {"path": path}
        if recursive:
            self._params["recursive"] = "1"
        self._open()
        for ev in self:  # the first event says the watch is in place
            if ev.type == "ready":
                break

    def _open(self) -> None:
        self._cm = self._sbx._http.client.stream("GET", f"/v1/sandbox/{self._sbx.id}/fs/watch", params=self._params,
                                                 timeout=None, headers=self._cursor.headers())
        self._res = self._cm.__enter__()
        if self._res.status_code >= 400:
            self._res.read()
            err = refusal(self._res)
            self.close()
            raise err
        self._lines = self._res.iter_lines()

    def __iter__(self) -> Iterator[FilesystemEvent]:
        return self

    def __next__(self) -> FilesystemEvent:
        while True:
            try:
                for line in self._lines:
                    ev = self._cursor.feed(line)
                    if ev is not None:
                        return ev
                raise StopIteration  # the server ended the stream
            except httpx.TransportError:
                if self._closed:
                    raise StopIteration
                wait = self._cursor.broke()
                try:
                    self._cm.__exit__(None, None, None)
                except httpx.TransportError:
                    pass
                time.sleep(wait)
                self._open()

    def close(self) -> None:
        self._closed = True
        self._cm.__exit__(None, None, None)

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Files:
    """``sbx.files``: whole files, binary-safe, and directory listings."""

    def __init__(self, sbx: "Sandbox"):
        self._sbx = sbx

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        res = self._sbx._http.request("GET", f"/v1/sandbox/{self._sbx.id}/fs", params={"path": path})
        if res.headers.get("X-Sandbox-Kind") == "directory":
            raise SandboxError(400, f"{path} is a directory; use files.list")
        return res.content

    def write(self, path: str, data: Union[str, bytes]) -> int:
        """Write the whole file (parents are created); returns its size."""
        body = data.encode() if isinstance(data, str) else data
        d = self._sbx._http.json("POST", f"/v1/sandbox/{self._sbx.id}/fs", params={"path": path}, content=body,
                                 headers={"Content-Type": "application/octet-stream"})
        return d["bytes"]

    def list(self, path: str = "") -> List[str]:
        """A directory's entries; directories end in '/'."""
        res = self._sbx._http.request("GET", f"/v1/sandbox/{self._sbx.id}/fs", params={"path": path})
        if res.headers.get("X-Sandbox-Kind") != "directory":
            raise SandboxError(400, f"{path} is a file, not a directory")
        return [e for e in res.text.split("\n") if e]

    def watch_dir(self, path: str = "", *, recursive: bool = False) -> "WatchHandle":
        """Watch a directory: iterate the handle for its changes (``.type``, ``.name``) as the sandbox makes
        them, until ``close()`` (or the ``with`` block ends). The watch is in place when this returns."""
        return WatchHandle(self._sbx, path, recursive)

    def archive(self, path: str = "", gzip: bool = False) -> bytes:
        """A directory as a tar (gzipped when ``gzip``)."""
        params = {"path": path, "gzip": "1"} if gzip else {"path": path}
        return self._sbx._http.request("GET", f"/v1/sandbox/{self._sbx.id}/fs/archive", params=params).content

    def extract(self, path: str, data: bytes) -> Dict[str, Any]:
        """Unpack a tar or tar.gz under the directory ``path``; an entry that would leave it refuses the
        whole archive and nothing is written."""
        return self._sbx._http.json("POST", f"/v1/sandbox/{self._sbx.id}/fs/archive", params={"path": path}, content=data,
                                    headers={"Content-Type": "application/x-tar"})


class Pty:
    """A terminal on a pty in the sandbox: ``send`` types, ``recv`` reads the
    screen's bytes (b"" once the shell has ended), ``resize`` sets its size.
    websockets has no synchronous client in Debian 12's version, so the
    socket lives on an event loop in a thread of its own."""

    def __init__(self, ws_url: str):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        from ._async import AsyncPty

        self._pty: AsyncPty = self._call(AsyncPty.open(ws_url))

    def _call(self, coro, timeout: Optional[float] = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def send(self, data: Union[str, bytes]) -> None:
        self._call(self._pty.send(data))

    def recv(self, timeout: Optional[float] = None) -> bytes:
        return self._call(self._pty.recv(), timeout)

    def resize(self, cols: int, rows: int) -> None:
        self._call(self._pty.resize(cols, rows))

    @property
    def reason(self) -> str:
        """The server's word on the end, e.g. "the shell exited (0)"."""
        return self._pty.reason

    def close(self) -> None:
        try:
            self._call(self._pty.close(), 10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


class Ops:
    """``sbx.ops``: the typed ops (the MCP tools' HTTP door), bodies that name
    the sandbox; answers as the API sends them (dicts)."""

    def __init__(self, sbx: "Sandbox"):
        self._sbx = sbx

    def run(self, cmd: Union[str, List[str]], **kw) -> Dict[str, Any]:
        body = exec_body(cmd, kw.get("stdin"), kw.get("cwd"), kw.get("timeout"), kw.get("envs"), kw.get("session"))
        return self._sbx._http.json("POST", "/v1/sandbox/run", json={"id": self._sbx.id, **body})

    def read(self, path: str = "") -> Dict[str, Any]:
        """A file (``data`` when UTF-8, always ``dataBase64``; at most 4 MiB) or a directory (``dir``, ``entries``)."""
        return self._sbx._http.json("POST", "/v1/sandbox/read", json={"id": self._sbx.id, "path": path})

    def write(self, path: str, text: str) -> Dict[str, Any]:
        return self._sbx._http.json("POST", "/v1/sandbox/write", json={"id": self._sbx.id, "path": path, "data": text})


class PtyFactory:
    """``sbx.pty``: open terminals."""

    def __init__(self, sbx: "Sandbox"):
        self._sbx = sbx

    def create(self, session: Optional[str] = None) -> Pty:
        """A login shell (or the tmux session ``session``, which outlives the connection)."""
        t = self._sbx._http.json("POST", f"/v1/sandbox/{self._sbx.id}/terminal/ticket")
        from ._async import ws_url

        return Pty(ws_url(self._sbx._http.url, self._sbx.id, t["ticket"], session))


class Sandbox:
    """A leased sandbox. ``Sandbox.create()`` leases one; ``with`` ends it."""

    def __init__(self, info: SandboxInfo, http: _HTTP):
        self.info = info
        self._http = http
        self.commands = Commands(self)
        self.files = Files(self)
        self.pty = PtyFactory(self)
        self.ops = Ops(self)

    @property
    def id(self) -> str:
        return self.info.id

    @classmethod
    def create(cls, class_: Optional[str] = None, *, project: Optional[str] = None, image: Optional[str] = None,
               timeout: Optional[float] = None, metadata: Optional[Dict[str, str]] = None,
               network: Optional[Dict[str, Any]] = None,
               api_url: Optional[str] = None, api_key: Optional[str] = None) -> "Sandbox":
        """Lease a sandbox; ``timeout`` is the lease in seconds (default: the class's); ``metadata``
        labels it (``Sandbox.list(metadata=...)`` filters by them); ``network`` is its egress policy,
        ``{"allow": ["pypi.org", "*.github.com", "203.0.113.0/24" or "internet"], "deny": [...],
        "ports": [443]}`` (default: no network; the operator's ``--network-allow`` bounds it)."""
        http = _shared(api_url, api_key)
        body = lease_body(class_, project, image, timeout, network)
        if metadata:
            body["metadata"] = metadata
        # A lease is retried after a 429 (refused before anything was made), never after a 503.
        d = http.json("POST", "/v1/sandbox", json=body)
        return cls(SandboxInfo.of(d), http)

    @classmethod
    def connect(cls, sandbox_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> "Sandbox":
        """A handle on one of the org's sandboxes."""
        http = _shared(api_url, api_key)
        return cls(SandboxInfo.of(http.json("GET", f"/v1/sandbox/{sandbox_id}")), http)

    @staticmethod
    def list(*, metadata: Optional[Dict[str, str]] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        """Every sandbox of the org, newest first; with ``metadata``, those labelled so."""
        http = _shared(api_url, api_key)
        out, cursor = [], None
        while True:
            params = {f"metadata.{k}": v for k, v in (metadata or {}).items()}
            if cursor:
                params["cursor"] = cursor
            d = http.json("GET", "/v1/sandbox", params=params or None)
            out += [SandboxInfo.of(s) for s in d["sandboxes"]]
            cursor = d.get("next")
            if not cursor:
                return out

    def refresh(self) -> SandboxInfo:
        self.info = SandboxInfo.of(self._http.json("GET", f"/v1/sandbox/{self.id}"))
        return self.info

    def set_timeout(self, timeout: float) -> None:
        """Extend the lease to ``timeout`` seconds from now (never past the ceiling)."""
        self.info = SandboxInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/renew", json={"ttlSec": int(timeout)}))

    def set_network(self, policy: Optional[Dict[str, Any]]) -> None:
        """Replace the egress policy (``Sandbox.create``'s ``network``; ``{}`` closes it): new
        connections follow it at once, open ones it refuses are cut. A sandbox leased with no network
        cannot be opened (409)."""
        self.info = SandboxInfo.of(self._http.json("PUT", f"/v1/sandbox/{self.id}/network", json=network_body(policy)))

    def get_host(self, port: int, *, timeout: Optional[float] = None) -> str:
        """The address of ``port``'s preview: the host-form URL (``http://{port}-sb-{…}.{domain}/``, the id with ``-`` for its ``_``, the app
        at /) with a link token a browser can open; the token is good for ``timeout`` seconds (default an
        hour, never past the lease), and whoever holds the URL opens that port."""
        body = {"ttlSec": int(timeout)} if timeout else {}
        return self._http.json("POST", f"/v1/sandbox/{self.id}/ports/{int(port)}/link", json=body)["url"]

    def create_code_context(self, language: str = "python", *, cwd: Optional[str] = None,
                            envs: Optional[Dict[str, str]] = None) -> CodeContext:
        """Open a code context: a Jupyter kernel (python or r), javascript or bash, whose variables, imports and working
        directory persist between runs; its kernel is ready when this returns."""
        return CodeContext.of(self._http.json("POST", f"/v1/sandbox/{self.id}/contexts", json=context_body(language, cwd, envs)))

    def list_code_contexts(self) -> List[CodeContext]:
        """The sandbox's code contexts, oldest first."""
        return [CodeContext.of(d) for d in self._http.json("GET", f"/v1/sandbox/{self.id}/contexts")["contexts"]]

    def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        """End a code context and its kernel."""
        self._http.json("DELETE", f"/v1/sandbox/{self.id}/contexts/{urllib.parse.quote(context_id(context, None), safe='')}")

    def interrupt_code_context(self, context: Union[CodeContext, str]) -> None:
        """Interrupt the context's run; its state stays."""
        self._http.json("POST", f"/v1/sandbox/{self.id}/contexts/{urllib.parse.quote(context_id(context, None), safe='')}/interrupt")

    def run_code(self, code: str, *, context: Union[CodeContext, str, None] = None, language: Optional[str] = None,
                 timeout: Optional[float] = None, on_stdout=None, on_stderr=None, on_result=None, on_error=None) -> Execution:
        """Run ``code`` in ``context``, or in ``language``'s default context (python unless said; opened on
        first use), and answer its execution: ``.results`` (``.text``, ``.html``, ``.png``…), ``.logs``,
        ``.error``. Past ``timeout`` seconds the kernel is interrupted and the state kept. With a callback,
        the run streams and each piece reaches it as it comes."""
        import json as _json

        path = f"/v1/sandbox/{self.id}/contexts/{urllib.parse.quote(context_id(context, language), safe='')}/run"
        body: Dict[str, Any] = {"code": code}
        if timeout:
            body["timeoutSec"] = max(1, int(timeout))
        if not (on_stdout or on_stderr or on_result or on_error):
            return Execution.of(self._http.json("POST", path, json=body))
        ex = Execution()
        with self._http.client.stream("POST", path, json=body, headers={"Accept": "application/x-ndjson"}, timeout=None) as res:
            if res.status_code >= 400:
                res.read()
                raise refusal(res)
            for line in res.iter_lines():
                if line and ex.add(_json.loads(line), on_stdout, on_stderr, on_result, on_error):
                    return ex
        raise SandboxError(502, "the run's stream ended before its end")

    def screen_url(self) -> str:
        """The address of the sandbox's display in a browser (noVNC; a desktop sandbox): a single-use ticket
        good for 30 s, to open at once."""
        return self._http.url + self._http.json("POST", f"/v1/sandbox/{self.id}/screen/ticket")["url"]

    def sleep(self) -> None:
        """Sleep now: the memory is kept where the backend can checkpoint."""
        self.info = SandboxInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/sleep"))

    def wake(self) -> None:
        """Wake now (any command, file call or renew wakes a sleeping sandbox too)."""
        self.info = SandboxInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/wake"))

    def pause(self) -> None:
        """``sleep``'s old name."""
        self.sleep()

    def resume(self) -> None:
        """``wake``'s old name."""
        self.wake()

    def set_metadata(self, metadata: Dict[str, str]) -> None:
        """Replace the sandbox's metadata ({} clears it)."""
        self.info = SandboxInfo.of(self._http.json("PUT", f"/v1/sandbox/{self.id}/metadata", json=metadata))

    def stats(self) -> Dict[str, Any]:
        """Its use now: cpuSeconds, memoryBytes, processes (absent with "unavailable" where the backend
        cannot tell) and the disk of its workdir and rootfs."""
        return self._http.json("GET", f"/v1/sandbox/{self.id}/stats")

    def stop(self) -> int:
        """Stop every command running in it; returns how many."""
        return self._http.json("POST", f"/v1/sandbox/{self.id}/stop")["stopped"]

    def narrate(self, session: str, text: str) -> None:
        """Append a note (an event of kind "note") to a session's live log in the org."""
        self._http.json("POST", f"/v1/sessions/{session}/events", json={"text": text})

    def logs(self, session: str, after: int = 0) -> Iterator[Event]:
        """Follow a session's live log: the backlog, then each event as it comes."""
        params = {"after": str(after)} if after else None
        with self._http.client.stream("GET", f"/v1/sessions/{session}/events", params=params, timeout=None) as res:
            if res.status_code >= 400:
                res.read()
                raise refusal(res)
            yield from parse_sse(res.iter_lines())

    def start_process(self, cmd: Union[str, List[str]], *, stdin: Optional[str] = None, cwd: Optional[str] = None,
                      envs: Optional[Dict[str, str]] = None, tty: bool = False, cols: Optional[int] = None, rows: Optional[int] = None,
                      timeout: Optional[float] = None, session: Optional[str] = None) -> ProcessInfo:
        """Start ``cmd`` (a shell line, or an argv list) in the background and return at once: it runs on
        after the call, its output kept (the last 1 MiB). ``timeout`` kills it after that many seconds."""
        body = process_body(cmd, stdin, cwd, envs, tty, cols, rows, timeout, session)
        return ProcessInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/processes", json=body))

    def processes(self) -> List[ProcessInfo]:
        """Its background processes, running and finished, oldest first."""
        return [ProcessInfo.of(p) for p in self._http.json("GET", f"/v1/sandbox/{self.id}/processes")["processes"]]

    def process(self, pid: int) -> ProcessInfo:
        return ProcessInfo.of(self._http.json("GET", f"/v1/sandbox/{self.id}/processes/{pid}"))

    def process_output(self, pid: int, from_: int = 0) -> Iterator[ProcessEvent]:
        """Follow a process's output after the offset ``from_`` (0: all that is still kept) until it ends
        (the last event is ``end``). A stream that breaks is resumed after the last event, so each byte
        comes once; after STREAM_TRIES breaks in a row with nothing new it raises SandboxError."""
        last, failed = from_, 0
        while True:
            stream, err = OutputStream(last), None
            try:
                with self._http.client.stream("GET", f"/v1/sandbox/{self.id}/processes/{pid}/output", params={"from": str(last)} if last else None,
                                              headers={"Accept": "text/event-stream"}, timeout=httpx.Timeout(None, connect=10.0)) as res:
                    if res.status_code >= 400:
                        res.read()
                        raise refusal(res)
                    for line in res.iter_lines():
                        ev = stream.feed(line)
                        if ev is not None:
                            yield ev
                            if stream.ended:
                                return
            except (httpx.TransportError, StreamBroken) as e:
                err = e
            if stream.last > last:
                last, failed = stream.last, 0
            else:
                failed += 1
                if failed >= STREAM_TRIES:
                    raise SandboxError(502, f"the output stream of process {pid} broke {failed} times in a row: {err or 'it ended early'}")
            time.sleep(0.1 * 2 ** failed)

    def send_stdin(self, pid: int, data: Union[str, bytes], eof: bool = False) -> int:
        """Write ``data`` to a process's stdin (``eof`` then closes it; a tty process gets ^D); how many bytes."""
        body = data.encode() if isinstance(data, str) else data
        d = self._http.json("POST", f"/v1/sandbox/{self.id}/processes/{pid}/stdin", params={"eof": "1"} if eof else None, content=body,
                            headers={"Content-Type": "application/octet-stream"})
        return d["written"]

    def signal(self, pid: int, signal: str = "TERM") -> ProcessInfo:
        """Send a signal (TERM, INT, KILL, HUP, USR1, ... or a number) to a process and its group."""
        return ProcessInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/processes/{pid}/signal", json={"signal": str(signal)}))

    def resize_process(self, pid: int, cols: int, rows: int) -> ProcessInfo:
        """Set a tty process's terminal size."""
        return ProcessInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/processes/{pid}/resize", json={"cols": cols, "rows": rows}))

    def fork(self, *, project: Optional[str] = None, timeout: Optional[float] = None, metadata: Optional[Dict[str, str]] = None) -> "Sandbox":
        """A new sandbox that goes on from this one's memory and files at this instant (its processes
        too) while this one runs on. A project sandbox's fork needs a new ``project``, which gets a copy
        of the volume; ``timeout`` is its lease in seconds; ``metadata`` defaults to this one's."""
        return Sandbox(SandboxInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/fork", json=fork_body(project, timeout, metadata))), self._http)

    def snapshot(self, name: str, *, workdir: bool = False) -> ImageInfo:
        """Save this sandbox's filesystem as the org's image ``name``: what it changed in its root
        (packages installed) and, with ``workdir``, its workdir. ``Sandbox.create(image=name)`` and
        ``run_code(image=name)`` start from it; memory is not saved (``fork`` copies it)."""
        return ImageInfo.of(self._http.json("POST", f"/v1/sandbox/{self.id}/snapshot", json=snapshot_body(name, workdir)))

    def kill(self, purge: bool = False) -> None:
        """End the sandbox (``purge`` drops its project volume too)."""
        self._http.request("DELETE", f"/v1/sandbox/{self.id}", params={"purge": "1"} if purge else None)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.kill()
        except SandboxError:
            pass


def run_code(language: str, code: str, *, session_id: Optional[str] = None, args: Optional[List[str]] = None,
             timeout: Optional[float] = None, image: Optional[str] = None,
             api_url: Optional[str] = None, api_key: Optional[str] = None) -> RunCodeResult:
    """Run a program in the code interpreter (13 languages); pass the answer's
    ``session_id`` again to keep its files, or ``image`` (one of ``images()``)
    to start a new session on it."""
    body = run_code_body(language, code, session_id, args, timeout, image)
    return RunCodeResult.of(_shared(api_url, api_key).json("POST", "/v1/exec", json=body))


def pull_image(name: str, ref: str, *, username: Optional[str] = None, password: Optional[str] = None,
               api_url: Optional[str] = None, api_key: Optional[str] = None) -> ImageInfo:
    """Pull ``ref`` into the org's images as ``name``, from a registry the server allows (else a 403);
    its bytes count against the org's disk quota. The registry credentials serve this pull only."""
    return ImageInfo.of(_shared(api_url, api_key).json("POST", "/v1/images", json=pull_body(name, ref, username, password)))


def images(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[ImageInfo]:
    """The images the org may start from: its own, the server's, then the class images (``scope == "class"``)."""
    return [ImageInfo.of(d) for d in _shared(api_url, api_key).json("GET", "/v1/images")["images"]]


def delete_image(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> ImageInfo:
    """Delete one of the org's images (a 409 while a live sandbox runs it)."""
    return ImageInfo.of(_shared(api_url, api_key).json("DELETE", f"/v1/images/{urllib.parse.quote(name, safe='')}"))


def quotas(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """Each quota of the org with its use now (``{"name", "limit", "used", …}``)."""
    return _shared(api_url, api_key).json("GET", "/v1/sandbox/quota")["quotas"]


def usage(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """The org's lease count and lease-seconds, by class."""
    return _shared(api_url, api_key).json("GET", "/v1/sandbox/usage")["usage"]


def volumes(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """The org's project volumes with their size and last use."""
    return _shared(api_url, api_key).json("GET", "/v1/volumes")["volumes"]


def delete_volume(project: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
    """Delete a project's volume (a 409 while a live sandbox holds it)."""
    return _shared(api_url, api_key).json("DELETE", f"/v1/volumes/{urllib.parse.quote(project, safe='')}")


def info(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
    """The server's version, backend and capabilities."""
    return _shared(api_url, api_key).json("GET", "/v1/info")


def session_files(session_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """The files of an interpreter session (``run_code``'s ``session_id``)."""
    return _shared(api_url, api_key).json("GET", f"/v1/exec/{urllib.parse.quote(session_id, safe='')}/files")["files"]


def upload_file(session_id: str, name: str, data: Union[str, bytes], *, api_url: Optional[str] = None,
                api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """Upload a file into an interpreter session's workdir (its base name is kept); answers the file written."""
    body = data.encode() if isinstance(data, str) else data
    return _shared(api_url, api_key).json("POST", f"/v1/exec/{urllib.parse.quote(session_id, safe='')}/files",
                                          files={"file": (name, body)})["files"]


def download_file(session_id: str, path: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> bytes:
    """A file of an interpreter session, its bytes."""
    return _shared(api_url, api_key).request(
        "GET", f"/v1/exec/{urllib.parse.quote(session_id, safe='')}/files/{urllib.parse.quote(path)}").content
