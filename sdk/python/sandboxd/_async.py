"""The asyncio client: the same surface as ``Sandbox``, awaited."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any, AsyncIterator, Dict, List, Optional, Union

import httpx
import websockets

from ._transport import async_transport
from ._errors import SandboxError, refusal, should_retry
from ._models import (CodeContext, Execution, FilesystemEvent, WatchCursor, context_body, context_id)
from ._models import (CommandResult, Event, ImageInfo, OutputStream, ProcessEvent, ProcessInfo, RunCodeResult, SandboxInfo, StreamBroken,
                      exec_body, fork_body, lease_body, network_body, parse_sse, process_body, pull_body, run_code_body, snapshot_body)
from ._sync import STREAM_TRIES, _config


def ws_url(base: str, sandbox_id: str, ticket: str, session: Optional[str]) -> str:
    u = urllib.parse.urlsplit(base)
    scheme = "wss" if u.scheme == "https" else "ws"
    q = {"ticket": ticket}
    if session:
        q["arg"] = session
    return urllib.parse.urlunsplit((scheme, u.netloc, u.path.rstrip("/") + f"/v1/sandbox/{sandbox_id}/terminal/ws", urllib.parse.urlencode(q), ""))


class _AsyncHTTP:
    def __init__(self, api_url: Optional[str], api_key: Optional[str], retries: int = 3, max_wait: float = 30.0):
        self.url, self.key = _config(api_url, api_key)
        self.retries, self.max_wait = retries, max_wait
        self.client = httpx.AsyncClient(base_url=self.url, headers={"Authorization": "Bearer " + self.key},
                                 timeout=httpx.Timeout(660.0, connect=10.0), transport=async_transport())

    async def request(self, method: str, path: str, **kw) -> httpx.Response:
        attempt = 0
        while True:
            res = await self.client.request(method, path, **kw)
            if res.status_code < 400:
                return res
            err = refusal(res)
            if not should_retry(method, err, attempt, self.retries) or "content" in kw:
                raise err
            await asyncio.sleep(min(err.retry_after or 1, self.max_wait))
            attempt += 1

    async def json(self, method: str, path: str, **kw) -> Any:
        return (await self.request(method, path, **kw)).json()


class AsyncPty:
    """A terminal: ``send`` types, ``recv`` reads (b"" once the shell ended)."""

    def __init__(self, ws):
        self._ws = ws
        self.reason = ""

    @classmethod
    async def open(cls, url: str) -> "AsyncPty":
        try:
            ws = await websockets.connect(url, compression=None, max_size=1 << 20)
        except websockets.exceptions.InvalidStatusCode as e:
            raise SandboxError(e.status_code, "the terminal socket was refused") from e
        return cls(ws)

    async def send(self, data: Union[str, bytes]) -> None:
        await self._ws.send(data.encode() if isinstance(data, str) else data)

    async def recv(self) -> bytes:
        try:
            msg = await self._ws.recv()
        except websockets.exceptions.ConnectionClosed as e:
            self.reason = e.rcvd.reason if e.rcvd else ""
            if e.rcvd and e.rcvd.code != 1000:
                raise SandboxError(502, f"the terminal closed: {self.reason}") from e
            return b""
        return msg if isinstance(msg, bytes) else msg.encode()

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    async def close(self) -> None:
        await self._ws.close()


class AsyncWatchHandle:
    """An open watch (``AsyncSandbox.watch_dir``): an async context manager and an async iterator of
    FilesystemEvent. A stream that breaks is resumed after the last event (the server keeps the watch 30 s): the
    changes of meanwhile come first, or an ``overflow`` event where some were lost."""

    def __init__(self, sbx: "AsyncSandbox", path: str, recursive: bool):
        self._sbx, self._cursor, self._closed = sbx, WatchCursor(), False
        self._params = {"path": path}
        if recursive:
            self._params["recursive"] = "1"
        self._cm: Any = None
        self._lines: Optional[AsyncIterator[str]] = None

    async def _open(self) -> None:
        self._cm = self._sbx._http.client.stream("GET", f"/v1/sandbox/{self._sbx.id}/fs/watch", params=self._params,
                                                 timeout=None, headers=self._cursor.headers())
        res = await self._cm.__aenter__()
        if res.status_code >= 400:
            await res.aread()
            err = refusal(res)
            await self.aclose()
            raise err
        self._lines = res.aiter_lines()

    async def __aenter__(self) -> "AsyncWatchHandle":
        await self._open()
        async for ev in self:  # the first event says the watch is in place
            if ev.type == "ready":
                break
        return self

    def __aiter__(self) -> "AsyncWatchHandle":
        return self

    async def __anext__(self) -> FilesystemEvent:
        assert self._lines is not None, "enter the watch with async with first"
        while True:
            try:
                async for line in self._lines:
                    ev = self._cursor.feed(line)
                    if ev is not None:
                        return ev
                raise StopAsyncIteration  # the server ended the stream
            except httpx.TransportError:
                if self._closed:
                    raise StopAsyncIteration
                wait = self._cursor.broke()
                try:
                    await self._cm.__aexit__(None, None, None)
                except httpx.TransportError:
                    pass
                await asyncio.sleep(wait)
                await self._open()

    async def aclose(self) -> None:
        self._closed = True
        if self._cm is not None:
            await self._cm.__aexit__(None, None, None)

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class AsyncSandbox:
    """A leased sandbox: ``await AsyncSandbox.create()``; ``async with`` ends it."""

    def __init__(self, info: SandboxInfo, http: _AsyncHTTP):
        self.info = info
        self._http = http

    @property
    def id(self) -> str:
        return self.info.id

    @classmethod
    async def create(cls, class_: Optional[str] = None, *, project: Optional[str] = None, image: Optional[str] = None,
                     timeout: Optional[float] = None, network: Optional[Dict[str, Any]] = None,
                     api_url: Optional[str] = None, api_key: Optional[str] = None) -> "AsyncSandbox":
        """Lease a sandbox (``Sandbox.create``; ``network`` is its egress policy)."""
        http = _AsyncHTTP(api_url, api_key)
        return cls(SandboxInfo.of(await http.json("POST", "/v1/sandbox", json=lease_body(class_, project, image, timeout, network))), http)

    @classmethod
    async def connect(cls, sandbox_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> "AsyncSandbox":
        http = _AsyncHTTP(api_url, api_key)
        return cls(SandboxInfo.of(await http.json("GET", f"/v1/sandbox/{sandbox_id}")), http)

    async def run(self, cmd: Union[str, List[str]], *, stdin: Optional[str] = None, cwd: Optional[str] = None,
                  timeout: Optional[float] = None, envs: Optional[Dict[str, str]] = None, session: Optional[str] = None) -> CommandResult:
        """Run a command and wait (``sbx.commands.run`` of the sync client)."""
        return CommandResult.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/exec", json=exec_body(cmd, stdin, cwd, timeout, envs, session)))

    async def read(self, path: str) -> bytes:
        res = await self._http.request("GET", f"/v1/sandbox/{self.id}/fs", params={"path": path})
        if res.headers.get("X-Sandbox-Kind") == "directory":
            raise SandboxError(400, f"{path} is a directory; use list")
        return res.content

    async def write(self, path: str, data: Union[str, bytes]) -> int:
        body = data.encode() if isinstance(data, str) else data
        d = await self._http.json("POST", f"/v1/sandbox/{self.id}/fs", params={"path": path}, content=body,
                                  headers={"Content-Type": "application/octet-stream"})
        return d["bytes"]

    async def list(self, path: str = "") -> List[str]:
        res = await self._http.request("GET", f"/v1/sandbox/{self.id}/fs", params={"path": path})
        if res.headers.get("X-Sandbox-Kind") != "directory":
            raise SandboxError(400, f"{path} is a file, not a directory")
        return [e for e in res.text.split("\n") if e]

    async def refresh(self) -> SandboxInfo:
        """Read the sandbox again (``Sandbox.refresh``)."""
        self.info = SandboxInfo.of(await self._http.json("GET", f"/v1/sandbox/{self.id}"))
        return self.info

    @staticmethod
    async def list_sandboxes(*, metadata: Optional[Dict[str, str]] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        """Every sandbox of the org, newest first (``Sandbox.list``; an AsyncSandbox's ``list`` lists its files)."""
        params: Dict[str, str] = {f"metadata.{k}": v for k, v in (metadata or {}).items()}
        out: List[SandboxInfo] = []
        while True:
            page = await _once(api_url, api_key, "GET", "/v1/sandbox", params=params)
            out += [SandboxInfo.of(d) for d in page["sandboxes"]]
            if not page.get("next"):
                return out
            params["cursor"] = page["next"]

    async def set_metadata(self, metadata: Dict[str, str]) -> None:
        self.info = SandboxInfo.of(await self._http.json("PUT", f"/v1/sandbox/{self.id}/metadata", json=metadata))

    async def stats(self) -> Dict[str, Any]:
        return await self._http.json("GET", f"/v1/sandbox/{self.id}/stats")

    async def stop(self) -> int:
        """Stop every command running in the sandbox; how many."""
        return (await self._http.json("POST", f"/v1/sandbox/{self.id}/stop"))["stopped"]

    async def sleep(self) -> None:
        self.info = SandboxInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/sleep"))

    async def wake(self) -> None:
        self.info = SandboxInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/wake"))

    async def archive(self, path: str = "", gzip: bool = False) -> bytes:
        """A directory as a tar (``files.archive``)."""
        res = await self._http.request("GET", f"/v1/sandbox/{self.id}/fs/archive", params={"path": path, "gzip": "1"} if gzip else {"path": path})
        return res.content

    async def extract(self, path: str, data: bytes) -> Dict[str, Any]:
        """Extract a tar or tar.gz under ``path`` (``files.extract``)."""
        return await self._http.json("POST", f"/v1/sandbox/{self.id}/fs/archive", params={"path": path}, content=data)

    def watch_dir(self, path: str = "", *, recursive: bool = False) -> "AsyncWatchHandle":
        """Watch a directory (``files.watch_dir``): ``async with sbx.watch_dir(path) as w: async for ev in w``
        yields FilesystemEvent (``.type``, ``.name``) as the sandbox makes changes; the watch is in place once
        the ``async with`` is entered, and ends with it."""
        return AsyncWatchHandle(self, path, recursive)

    async def screen_url(self) -> str:
        return self._http.url + (await self._http.json("POST", f"/v1/sandbox/{self.id}/screen/ticket"))["url"]

    async def pty(self, session: Optional[str] = None) -> AsyncPty:
        t = await self._http.json("POST", f"/v1/sandbox/{self.id}/terminal/ticket")
        return await AsyncPty.open(ws_url(self._http.url, self.id, t["ticket"], session))

    async def narrate(self, session: str, text: str) -> None:
        """Append a note to a session's live log (``Sandbox.narrate``)."""
        await self._http.json("POST", f"/v1/sessions/{session}/events", json={"text": text})

    async def logs(self, session: str, after: int = 0) -> AsyncIterator[Event]:
        params = {"after": str(after)} if after else None
        async with self._http.client.stream("GET", f"/v1/sessions/{session}/events", params=params, timeout=None) as res:
            if res.status_code >= 400:
                await res.aread()
                raise refusal(res)
            async for line in res.aiter_lines():
                for e in parse_sse([line]):
                    yield e

    async def start_process(self, cmd: Union[str, List[str]], *, stdin: Optional[str] = None, cwd: Optional[str] = None,
                            envs: Optional[Dict[str, str]] = None, tty: bool = False, cols: Optional[int] = None, rows: Optional[int] = None,
                            timeout: Optional[float] = None, session: Optional[str] = None) -> ProcessInfo:
        """Start a background process (``Sandbox.start_process``)."""
        body = process_body(cmd, stdin, cwd, envs, tty, cols, rows, timeout, session)
        return ProcessInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/processes", json=body))

    async def processes(self) -> List[ProcessInfo]:
        return [ProcessInfo.of(p) for p in (await self._http.json("GET", f"/v1/sandbox/{self.id}/processes"))["processes"]]

    async def process(self, pid: int) -> ProcessInfo:
        return ProcessInfo.of(await self._http.json("GET", f"/v1/sandbox/{self.id}/processes/{pid}"))

    async def process_output(self, pid: int, from_: int = 0) -> AsyncIterator[ProcessEvent]:
        """Follow a process's output to its end, resumed after the last event when the stream breaks
        (``Sandbox.process_output``)."""
        last, failed = from_, 0
        while True:
            stream, err = OutputStream(last), None
            try:
                async with self._http.client.stream("GET", f"/v1/sandbox/{self.id}/processes/{pid}/output", params={"from": str(last)} if last else None,
                                                    headers={"Accept": "text/event-stream"}, timeout=httpx.Timeout(None, connect=10.0)) as res:
                    if res.status_code >= 400:
                        await res.aread()
                        raise refusal(res)
                    async for line in res.aiter_lines():
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
            await asyncio.sleep(0.1 * 2 ** failed)

    async def send_stdin(self, pid: int, data: Union[str, bytes], eof: bool = False) -> int:
        body = data.encode() if isinstance(data, str) else data
        d = await self._http.json("POST", f"/v1/sandbox/{self.id}/processes/{pid}/stdin", params={"eof": "1"} if eof else None, content=body,
                                  headers={"Content-Type": "application/octet-stream"})
        return d["written"]

    async def signal(self, pid: int, signal: str = "TERM") -> ProcessInfo:
        return ProcessInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/processes/{pid}/signal", json={"signal": str(signal)}))

    async def resize_process(self, pid: int, cols: int, rows: int) -> ProcessInfo:
        return ProcessInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/processes/{pid}/resize", json={"cols": cols, "rows": rows}))

    async def fork(self, *, project: Optional[str] = None, timeout: Optional[float] = None, metadata: Optional[Dict[str, str]] = None) -> "AsyncSandbox":
        """A new sandbox going on from this one's memory and files (``Sandbox.fork``), with a client of
        its own (``async with`` it to end it)."""
        d = await self._http.json("POST", f"/v1/sandbox/{self.id}/fork", json=fork_body(project, timeout, metadata))
        return AsyncSandbox(SandboxInfo.of(d), _AsyncHTTP(self._http.url, self._http.key))

    async def set_network(self, policy: Optional[Dict[str, Any]]) -> None:
        """Replace the egress policy (``Sandbox.set_network``)."""
        self.info = SandboxInfo.of(await self._http.json("PUT", f"/v1/sandbox/{self.id}/network", json=network_body(policy)))

    async def get_host(self, port: int, *, timeout: Optional[float] = None) -> str:
        """The preview's host-form URL with a link token (``Sandbox.get_host``)."""
        body = {"ttlSec": int(timeout)} if timeout else {}
        return (await self._http.json("POST", f"/v1/sandbox/{self.id}/ports/{int(port)}/link", json=body))["url"]

    async def create_code_context(self, language: str = "python", *, cwd: Optional[str] = None,
                                  envs: Optional[Dict[str, str]] = None) -> CodeContext:
        """Open a code context (``Sandbox.create_code_context``)."""
        return CodeContext.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/contexts", json=context_body(language, cwd, envs)))

    async def list_code_contexts(self) -> List[CodeContext]:
        return [CodeContext.of(d) for d in (await self._http.json("GET", f"/v1/sandbox/{self.id}/contexts"))["contexts"]]

    async def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        await self._http.json("DELETE", f"/v1/sandbox/{self.id}/contexts/{urllib.parse.quote(context_id(context, None), safe='')}")

    async def interrupt_code_context(self, context: Union[CodeContext, str]) -> None:
        await self._http.json("POST", f"/v1/sandbox/{self.id}/contexts/{urllib.parse.quote(context_id(context, None), safe='')}/interrupt")

    async def run_code(self, code: str, *, context: Union[CodeContext, str, None] = None, language: Optional[str] = None,
                       timeout: Optional[float] = None, on_stdout=None, on_stderr=None, on_result=None, on_error=None) -> Execution:
        """Run code in a context (``Sandbox.run_code``)."""
        path = f"/v1/sandbox/{self.id}/contexts/{urllib.parse.quote(context_id(context, language), safe='')}/run"
        body: Dict[str, Any] = {"code": code}
        if timeout:
            body["timeoutSec"] = max(1, int(timeout))
        if not (on_stdout or on_stderr or on_result or on_error):
            return Execution.of(await self._http.json("POST", path, json=body))
        ex = Execution()
        async with self._http.client.stream("POST", path, json=body, headers={"Accept": "application/x-ndjson"}, timeout=None) as res:
            if res.status_code >= 400:
                await res.aread()
                raise refusal(res)
            async for line in res.aiter_lines():
                if line and ex.add(json.loads(line), on_stdout, on_stderr, on_result, on_error):
                    return ex
        raise SandboxError(502, "the run's stream ended before its end")

    async def set_timeout(self, timeout: float) -> None:
        self.info = SandboxInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/renew", json={"ttlSec": int(timeout)}))

    async def snapshot(self, name: str, *, workdir: bool = False) -> ImageInfo:
        """Save this sandbox's filesystem as the org's image ``name`` (``Sandbox.snapshot``)."""
        return ImageInfo.of(await self._http.json("POST", f"/v1/sandbox/{self.id}/snapshot", json=snapshot_body(name, workdir)))

    async def kill(self, purge: bool = False) -> None:
        await self._http.request("DELETE", f"/v1/sandbox/{self.id}", params={"purge": "1"} if purge else None)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.kill()
        except SandboxError:
            pass
        await self._http.client.aclose()


async def _once(api_url: Optional[str], api_key: Optional[str], method: str, path: str, **kw) -> Any:
    """One call on a client of its own, closed after it."""
    http = _AsyncHTTP(api_url, api_key)
    try:
        return await http.json(method, path, **kw)
    finally:
        await http.client.aclose()


async def async_run_code(language: str, code: str, *, session_id: Optional[str] = None, args: Optional[List[str]] = None,
                         timeout: Optional[float] = None, image: Optional[str] = None,
                         api_url: Optional[str] = None, api_key: Optional[str] = None) -> RunCodeResult:
    body = run_code_body(language, code, session_id, args, timeout, image)
    return RunCodeResult.of(await _once(api_url, api_key, "POST", "/v1/exec", json=body))


async def async_pull_image(name: str, ref: str, *, username: Optional[str] = None, password: Optional[str] = None,
                           api_url: Optional[str] = None, api_key: Optional[str] = None) -> ImageInfo:
    """``pull_image``, awaited."""
    return ImageInfo.of(await _once(api_url, api_key, "POST", "/v1/images", json=pull_body(name, ref, username, password)))


async def async_images(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[ImageInfo]:
    """``images``, awaited."""
    return [ImageInfo.of(d) for d in (await _once(api_url, api_key, "GET", "/v1/images"))["images"]]


async def async_delete_image(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> ImageInfo:
    """``delete_image``, awaited."""
    return ImageInfo.of(await _once(api_url, api_key, "DELETE", f"/v1/images/{urllib.parse.quote(name, safe='')}"))


async def async_quotas(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """``quotas``, awaited."""
    return (await _once(api_url, api_key, "GET", "/v1/sandbox/quota"))["quotas"]


async def async_usage(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    return (await _once(api_url, api_key, "GET", "/v1/sandbox/usage"))["usage"]


async def async_volumes(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    return (await _once(api_url, api_key, "GET", "/v1/volumes"))["volumes"]


async def async_delete_volume(project: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
    return await _once(api_url, api_key, "DELETE", f"/v1/volumes/{urllib.parse.quote(project, safe='')}")


async def async_info(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
    return await _once(api_url, api_key, "GET", "/v1/info")


async def async_session_files(session_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    return (await _once(api_url, api_key, "GET", f"/v1/exec/{urllib.parse.quote(session_id, safe='')}/files"))["files"]


async def async_upload_file(session_id: str, name: str, data: Union[str, bytes], *, api_url: Optional[str] = None,
                            api_key: Optional[str] = None) -> List[Dict[str, Any]]:
    body = data.encode() if isinstance(data, str) else data
    return (await _once(api_url, api_key, "POST", f"/v1/exec/{urllib.parse.quote(session_id, safe='')}/files",
                        files={"file": (name, body)}))["files"]


async def async_download_file(session_id: str, path: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> bytes:
    """``download_file``, awaited."""
    h = _AsyncHTTP(api_url, api_key)
    try:
        return (await h.request("GET", f"/v1/exec/{urllib.parse.quote(session_id, safe='')}/files/{urllib.parse.quote(path)}")).content
    finally:
        await h.client.aclose()
