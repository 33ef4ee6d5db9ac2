"""The Python SDK against a real server (SANDBOX_URL, SANDBOX_KEY): run by
sdk/sdk_test.go, which starts one, and by internal/server's
TestHelmInCluster against the server the Helm chart runs in the test cluster
(what the server's backend does not do, by GET /v1/info's capabilities, is
skipped, and nothing else)."""

import asyncio
import json
import os
import time

import httpx
import pytest

from sandboxd import (AsyncSandbox, NotFoundError, Sandbox, SandboxError, async_delete_image, async_images, async_pull_image,
                      async_run_code, delete_image, images, pull_image, run_code)
from sandboxd._sync import _HTTP

# What the server's backend can do beyond the core (GET /v1/info): a case
# skips by capability, never by the backend's name.
_info = httpx.get(os.environ["SANDBOX_URL"].rstrip("/") + "/v1/info",
                  headers={"Authorization": "Bearer " + os.environ["SANDBOX_KEY"]})
_info.raise_for_status()
CAPS = set(_info.json()["capabilities"])
BACKEND = _info.json()["backend"]
needs_runner = pytest.mark.skipif("runner" not in CAPS, reason="the backend has no in-sandbox runner: no background processes")
# On kube a snapshot starts from a pulled image only: the class images these
# cases lease are on the nodes, in no registry (501 by design).
needs_diff = pytest.mark.skipif("rootfs-diff" not in CAPS or BACKEND == "kube",
                                reason="no snapshot of a class-image sandbox on this backend")


def test_sync_sandbox():
    with Sandbox.create(timeout=300) as sbx:
        assert sbx.info.kind == "sandbox" and sbx.info.status == "running"
        assert sbx.info.expires_at - time.time() > 240  # a lease within a minute, on a busy machine too

        r = sbx.commands.run("read x; echo got-$x; exit 3", stdin="hi\n")
        assert (r.exit_code, r.stdout) == (3, "got-hi\n")
        r = sbx.commands.run(["sleep", "30"], timeout=1)
        assert r.timed_out and r.exit_code == 124

        lines = []
        r = sbx.commands.stream("for i in 1 2; do echo $i; sleep 1; done; exit 4", on_stdout=lines.append)
        assert r.exit_code == 4 and b"".join(lines) == b"1\n2\n"

        data = bytes([0, 255, 1, 10, 0xC3, 0x28])
        assert sbx.files.write("d/bin.dat", data) == len(data)
        assert sbx.files.read("d/bin.dat") == data
        assert sbx.files.list("d") == ["bin.dat"]
        tgz = sbx.files.archive("d", gzip=True)
        assert sbx.files.extract("d2", tgz)["entries"] >= 1
        assert sbx.files.read("d2/bin.dat") == data
        if "stats" in CAPS:
            assert sbx.stats()["processes"] >= 1

        sbx.set_metadata({"suite": "py"})
        assert sbx.info.metadata == {"suite": "py"}
        assert [s.id for s in Sandbox.list(metadata={"suite": "py"})] == [sbx.id]

        assert sbx.ops.write("typed.txt", "typed")["bytes"] == 5
        assert sbx.ops.read("typed.txt")["data"] == "typed"
        assert sbx.ops.read("")["dir"] is True
        assert sbx.ops.run("exit 9")["exitCode"] == 9

        pty = sbx.pty.create()
        pty.resize(100, 30)
        pty.send("echo $((6*7))-$(tput cols)\r")
        seen = b""
        deadline = time.time() + 30
        while b"42-100" not in seen and time.time() < deadline:
            seen += pty.recv(timeout=30)
        assert b"42-100" in seen
        pty.send("exit\r")
        while pty.recv(timeout=30):
            pass
        assert "exited" in pty.reason
        pty.close()

        sbx.commands.run("echo narrated", session="build")
        sbx.narrate("build", "built")
        kinds = []
        for e in sbx.logs("build"):
            kinds.append(e.kind)
            if e.kind == "note":
                break
        assert "stdout" in kinds and "exit" in kinds

        sbx.set_timeout(600)
        assert sbx.info.expires_at - time.time() > 590
        sbx.sleep()
        assert sbx.info.status == "sleeping"
        sbx.wake()
        assert sbx.info.status == "running"
        sbx.pause()  # the old names stay
        assert sbx.info.status == "sleeping"
        sbx.resume()
        assert sbx.info.status == "running"
        assert Sandbox.connect(sbx.id).id == sbx.id
        assert any(s.id == sbx.id for s in Sandbox.list())
        sid = sbx.id
    with pytest.raises(NotFoundError):
        Sandbox.connect(sid)


def test_errors_carry_the_server_message():
    with pytest.raises(SandboxError) as e:
        Sandbox.create("huge")
    assert e.value.status == 400 and "exec" in e.value.message


def test_run_code():
    r = run_code("py", "import sys\nprint(6*7)\nsys.exit(2)")
    assert (r.exit_code, r.stdout) == (2, "42\n") and r.session_id


def test_async_sandbox():
    async def main():
        async with await AsyncSandbox.create() as sbx:
            r = await sbx.run("echo async")
            assert r.stdout == "async\n"
            await sbx.write("a.txt", "text")
            assert await sbx.read("a.txt") == b"text"
            assert await sbx.list() == ["a.txt"]
            pty = await sbx.pty()
            await pty.send("echo pty-$((1+1))\r")
            seen = b""
            while b"pty-2" not in seen:
                seen += await asyncio.wait_for(pty.recv(), 30)
            await pty.close()

    asyncio.run(main())


class _Cut(httpx.BaseTransport):
    """Breaks the first output stream after its first event, as a dropped
    connection does, and records the offset each output request asked from."""

    def __init__(self):
        self.inner = httpx.HTTPTransport()
        self.starts = []

    def handle_request(self, request):
        res = self.inner.handle_request(request)
        if request.url.path.endswith("/output") and res.headers.get("content-type") == "text/event-stream":
            self.starts.append(request.url.params.get("from", ""))
            if len(self.starts) == 1:
                return httpx.Response(res.status_code, headers=res.headers, stream=_CutStream(res.stream), extensions=res.extensions)
        return res


class _CutStream(httpx.SyncByteStream):
    """Passes the retry hint and one event (two blank lines), then fails."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        blanks, prev = 2, b""
        for chunk in self.inner:
            for i in range(len(chunk)):
                if chunk[i:i + 1] == b"\n" and prev == b"\n":
                    blanks -= 1
                    if blanks == 0:
                        yield chunk[:i + 1]
                        raise httpx.ReadError("cut")
                prev = chunk[i:i + 1]
            yield chunk

    def close(self):
        self.inner.close()


def _cut_view(sbx: Sandbox, cut: _Cut) -> Sandbox:
    """A handle on sbx whose calls go through cut."""
    http = _HTTP(None, None)
    http.client = httpx.Client(base_url=http.url, headers={"Authorization": "Bearer " + http.key}, transport=cut)
    return Sandbox(sbx.info, http)


@needs_runner
def test_processes():
    with Sandbox.create() as sbx:
        p = sbx.start_process("for i in 1 2 3; do echo line $i; sleep 0.5; done; echo gone >&2; exit 3")
        assert p.running and p.pid > 0 and p.argv[0] == "sh"

        # Followed across a dropped connection: resumed after the last event, each byte once.
        cut = _Cut()
        out, kinds, end, first = b"", [], None, None
        for ev in _cut_view(sbx, cut).process_output(p.pid):
            kinds.append(ev.kind)
            out += ev.data
            end = ev.process or end
            first = ev.data if first is None else first
        assert out == b"line 1\nline 2\nline 3\ngone\n", kinds
        assert kinds[-1] == "end" and end.status == "exited" and end.exit_code == 3
        # The first event holds what the ring had when the follow began (a
        # line, or more on a slower backend); the resume asks from its end.
        assert cut.starts == ["", str(len(first))] and first.startswith(b"line 1\n")
        assert b"".join(e.data for e in sbx.process_output(p.pid, from_=14)) == b"line 3\ngone\n"

        cat = sbx.start_process(["cat"], stdin="a\n")
        assert sbx.send_stdin(cat.pid, b"b\x00\xff\n", eof=True) == 4
        assert b"".join(e.data for e in sbx.process_output(cat.pid)) == b"a\nb\x00\xff\n"

        tty = sbx.start_process("trap 'stty size; exit 0' USR1; echo ready; while :; do sleep 0.1; done", tty=True, cols=80, rows=24)
        live = sbx.process_output(tty.pid)
        seen = b""
        while b"ready" not in seen:  # the trap is set
            seen += next(live).data
        assert sbx.resize_process(tty.pid, 120, 40).tty
        sbx.signal(tty.pid, "USR1")
        assert b"40 120" in b"".join(e.data for e in live)

        # Followed live: the first line, then the signal, then the end.
        sleeper = sbx.start_process(["sh", "-c", "echo $X; exec sleep 600"], envs={"X": "from-env"})
        live = sbx.process_output(sleeper.pid)
        assert next(live).data == b"from-env\n"
        sbx.signal(sleeper.pid)
        end = list(live)[-1].process
        assert end.signal == "SIGTERM" and end.exit_code == 143
        with pytest.raises(SandboxError) as e:
            sbx.signal(sleeper.pid, "BOGUS")
        assert e.value.status == 400
        assert [q.pid for q in sbx.processes()] == [p.pid, cat.pid, tty.pid, sleeper.pid]
        assert not sbx.process(cat.pid).running
        with pytest.raises(NotFoundError):
            sbx.process(99999)
        with pytest.raises(NotFoundError):
            list(sbx.process_output(99999))


@needs_runner
def test_fork():
    with Sandbox.create(metadata={"side": "original"}) as sbx:
        sbx.files.write("f.txt", "before the fork")
        runner = sbx.start_process(["sleep", "600"])
        with sbx.fork(timeout=300, metadata={"side": "fork"}) as f:
            assert f.id != sbx.id and f.info.status == "running" and f.info.metadata == {"side": "fork"}
            assert f.files.read("f.txt") == b"before the fork"
            if f.info.memory_kept:
                assert f.process(runner.pid).running
            else:  # files only (a pod's memory is not copied): no process of the original's
                assert f.info.memory_kept is False
                with pytest.raises(NotFoundError):
                    f.process(runner.pid)
        with pytest.raises(SandboxError) as e:
            sbx.fork(project="p")
        assert e.value.status == 400 and "no project" in e.value.message


@needs_runner
def test_async_processes():
    async def main():
        async with await AsyncSandbox.create() as sbx:
            cat = await sbx.start_process(["cat"], stdin="a\n")
            assert await sbx.send_stdin(cat.pid, "b\n", eof=True) == 2
            out = b""
            async for ev in sbx.process_output(cat.pid):
                out += ev.data
            assert out == b"a\nb\n" and ev.kind == "end" and ev.process.exit_code == 0
            sleeper = await sbx.start_process("sleep 600")
            assert [p.pid for p in await sbx.processes()] == [cat.pid, sleeper.pid]
            async with await sbx.fork() as f:
                assert f.id != sbx.id
                if f.info.memory_kept:
                    assert (await f.process(sleeper.pid)).running
            await sbx.signal(sleeper.pid, "KILL")
            async for ev in sbx.process_output(sleeper.pid, from_=0):
                pass
            assert ev.process.signal == "SIGKILL"
            assert not (await sbx.process(sleeper.pid)).running

    asyncio.run(main())


#: An image sdk/sdk_test.go pushed to a registry the server allows (busybox
#: with /etc/greeting); unset where the machine has no registry.
IMAGE_REF = os.environ.get("SANDBOX_TEST_IMAGE_REF")


@needs_diff
def test_snapshot_and_images():
    with Sandbox.create() as sbx:
        sbx.commands.run("mkdir -p ~/.config && echo 41 > ~/.config/n && echo kept > notes.txt")
        im = sbx.snapshot("py-tpl", workdir=True)
        assert im.name == "py-tpl" and im.scope == "org" and im.digest.startswith("sha256:") and im.source == "snapshot of " + sbx.id
        assert im.size_bytes > 0 and im.created_at > 0
        sbx.commands.run("echo more > more.txt")  # another digest: a live sandbox on one holds every name of it
        code = sbx.snapshot("py-code", workdir=True)
        assert code.digest != im.digest
        with pytest.raises(SandboxError) as e:
            sbx.snapshot("bad name")
        assert e.value.status == 400
    listed = images()
    assert {(i.name, i.digest) for i in listed} >= {("py-tpl", im.digest), ("py-code", code.digest)}
    # The class images come too, each saying what it holds.
    exec_image = next(i for i in listed if i.scope == "class" and i.name == "exec")
    assert exec_image.class_ == "exec" and "pandas" in exec_image.holds and exec_image.digest == ""
    with pytest.raises(NotFoundError):
        sbx.snapshot("gone")

    r = run_code("py", "import os\nprint(int(open(os.path.expanduser('~/.config/n')).read()) + 1, open('notes.txt').read().strip())",
                 image="py-code")
    assert r.stdout == "42 kept\n", r
    with Sandbox.create(image="py-tpl") as again:
        assert again.info.image == im.digest
        assert again.files.read("notes.txt") == b"kept\n"
        with pytest.raises(SandboxError) as e:
            delete_image("py-tpl")
        assert e.value.status == 409
    assert delete_image("py-tpl").digest == im.digest
    with pytest.raises(NotFoundError):
        delete_image("py-tpl")


def test_pull_image():
    with pytest.raises(SandboxError) as e:
        pull_image("x", "127.0.0.2:1/x:1")
    assert e.value.status == 403
    if not IMAGE_REF:
        pytest.skip("no registry: SANDBOX_TEST_IMAGE_REF is unset")
    im = pull_image("tool", IMAGE_REF)
    assert im.name == "tool" and im.scope == "org" and im.source == IMAGE_REF and im.digest.startswith("sha256:")
    with Sandbox.create(image="tool") as sbx:
        assert sbx.commands.run("cat /etc/greeting").stdout == "hi from the image\n"
    assert delete_image("tool").digest == im.digest


@needs_diff
def test_async_images():
    async def main():
        async with await AsyncSandbox.create() as sbx:
            await sbx.run("echo a > a.txt")
            im = await sbx.snapshot("py-async", workdir=True)
            assert im.scope == "org" and im.source == "snapshot of " + sbx.id
        assert any(i.name == "py-async" and i.digest == im.digest for i in await async_images())
        r = await async_run_code("py", "print(open('a.txt').read().strip())", image="py-async")
        assert r.stdout == "a\n"
        if IMAGE_REF:
            p = await async_pull_image("tool-async", IMAGE_REF)
            assert p.name == "tool-async" and p.source == IMAGE_REF
            assert (await async_delete_image("tool-async")).digest == p.digest
        with pytest.raises(NotFoundError):
            await async_delete_image("no-such-image")

    asyncio.run(main())



# The name the test server's sandboxes may reach in its own test internet
# (sdk/sdk_test.go); unset: the server was started without a network.
NETWORK = os.environ.get("SANDBOX_TEST_NETWORK")
_FETCH = ("import sys, urllib.request\n"
          "try: print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())\n"
          "except Exception as e: print('refused', type(e).__name__)")


@pytest.mark.skipif(not NETWORK, reason="the test server was started with no network (SANDBOX_TEST_NETWORK is unset)")
def test_network():
    with Sandbox.create(network={"allow": [NETWORK]}) as sbx:
        assert sbx.info.network == {"allow": [NETWORK]}
        r = sbx.commands.run(["python3", "-c", _FETCH, f"http://{NETWORK}/"])
        assert NETWORK in r.stdout and "refused" not in r.stdout, r
        sbx.set_network({})
        assert not (sbx.info.network or {}).get("allow")
        assert "refused" in sbx.commands.run(["python3", "-c", _FETCH, f"http://{NETWORK}/"]).stdout
        with pytest.raises(ValueError):
            sbx.set_network({"alow": ["internet"]})
    with Sandbox.create() as closed:
        with pytest.raises(SandboxError) as err:
            closed.set_network({"allow": [NETWORK]})
        assert err.value.status == 409


def test_async_network():
    if not NETWORK:
        pytest.skip("the test server was started with no network (SANDBOX_TEST_NETWORK is unset)")

    async def go():
        async with await AsyncSandbox.create(network={"allow": [NETWORK]}) as sbx:
            assert sbx.info.network == {"allow": [NETWORK]}
            await sbx.set_network({})
            assert not (sbx.info.network or {}).get("allow")
    asyncio.run(go())


@needs_runner
def test_get_host():
    with Sandbox.create() as sbx:
        sbx.files.write("hello.txt", "hi from the preview")
        sbx.start_process(["python3", "-m", "http.server", "8000"])
        url = sbx.get_host(8000)
        u = httpx.URL(url)
        assert u.host.startswith(f"8000-{sbx.id.replace('_', '-', 1)}.") and "token" in str(u.query), url
        # The preview's host is this test's to resolve: ask the server's
        # address with the preview's Host, as a browser resolving it would.
        api = httpx.URL(os.environ["SANDBOX_URL"])
        deadline = time.time() + 20
        while True:
            res = httpx.get(str(u.copy_with(host=api.host, port=api.port, path="/hello.txt")),
                            headers={"Host": u.netloc.decode()}, follow_redirects=False)
            if res.status_code == 200 or time.time() > deadline:
                break
            time.sleep(0.5)
        if res.status_code in (302, 303):  # the link's cookie, then the file
            res = httpx.get(str(u.copy_with(host=api.host, port=api.port, path="/hello.txt", query=None)),
                            headers={"Host": u.netloc.decode()}, cookies=res.cookies)
        assert res.status_code == 200 and res.text == "hi from the preview", (res.status_code, res.text[:200])


async def _get_host_async(sbx):
    return await sbx.get_host(8000)


def test_async_get_host():
    async def go():
        async with await AsyncSandbox.create() as sbx:
            url = await _get_host_async(sbx)
            assert f"8000-{sbx.id.replace('_', '-', 1)}." in url and "token" in url
    asyncio.run(go())


@needs_runner
def test_code_contexts():
    with Sandbox.create(timeout=300) as sbx:
        ctx = sbx.create_code_context("python")
        assert ctx.language == "python" and ctx.id
        assert sbx.run_code("x = 40", context=ctx).error is None
        seen = []
        ex = sbx.run_code("print('hi'); x + 2", context=ctx, on_stdout=seen.append)
        assert ex.text == "42" and seen == ["hi\n"] and ex.logs.stdout == ["hi\n"]
        ex = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", context=ctx)
        assert any(r.png and r.png.startswith("iVBOR") for r in ex.results)
        ex = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1]})", context=ctx)
        assert "<table" in ex.results[0].html
        ex = sbx.run_code("1/0", context=ctx)
        assert ex.error.name == "ZeroDivisionError" and ex.error.traceback
        ex = sbx.run_code("import time; time.sleep(30)", context=ctx, timeout=2)
        assert ex.timed_out and ex.error.name == "TimeoutError"
        assert sbx.run_code("x", context=ctx).text == "40"
        # The default context is another kernel.
        assert sbx.run_code("x", language="python").error.name == "NameError"
        assert {c.id for c in sbx.list_code_contexts()} == {ctx.id, "python"}
        # The kernel is a child of the sandbox's runner: it sleeps and wakes
        # with it, and a fork that keeps memory has its variables too.
        if "checkpoint" in CAPS:
            sbx.sleep()
            assert sbx.info.status == "sleeping"
            sbx.wake()
            assert sbx.run_code("x * 6", context=ctx).text == "240"
            with sbx.fork(timeout=120) as f:
                if f.info.memory_kept:
                    assert f.run_code("x + 2", context=ctx).text == "42"
        sbx.remove_code_context(ctx)
        with pytest.raises(NotFoundError):
            sbx.run_code("x", context=ctx)


@needs_runner
def test_async_code_contexts():
    async def main():
        async with await AsyncSandbox.create(timeout=300) as sbx:
            ctx = await sbx.create_code_context("python")
            await sbx.run_code("y = 6", context=ctx)
            results = []
            ex = await sbx.run_code("y * 7", context=ctx, on_result=results.append)
            assert ex.text == "42" and results[0].text == "42"
            assert [c.id for c in await sbx.list_code_contexts()] == [ctx.id]
    asyncio.run(main())


# The installs an agent makes (internal/testenv's ServePackages), against
# the package index, npm registry and git server the test server's internet
# serves on NETWORK: [{"name", "script", "want"}].
PACKAGES = json.loads(os.environ.get("SANDBOX_TEST_PACKAGES") or "[]")


@pytest.mark.skipif(not PACKAGES or not NETWORK, reason="the test server serves no package index (SANDBOX_TEST_PACKAGES is unset)")
def test_package_managers():
    with Sandbox.create(timeout=600, network={"allow": [NETWORK]}) as sbx:
        for step in PACKAGES:
            r = sbx.commands.run(["bash", "-c", step["script"] + " 2>&1"], timeout=240)
            assert r.exit_code == 0 and step["want"] in r.stdout, (step["name"], r)


@needs_runner
def test_watch_dir():
    with Sandbox.create(timeout=300) as sbx:
        sbx.commands.run("mkdir -p build")
        with sbx.files.watch_dir("build", recursive=True) as w:
            sbx.commands.run("echo done > build/out.txt")
            seen = []
            for ev in w:
                seen.append((ev.type, ev.name))
                if ev.type == "written":
                    break
        assert seen == [("created", "out.txt"), ("written", "out.txt")]


class _CutStream(httpx.SyncByteStream):
    """A stream that breaks, as a dropped connection does, after its second blank line (the retry hint's,
    then the first event's)."""

    def __init__(self, inner):
        self._inner = inner

    def __iter__(self):
        buf = b""
        for chunk in self._inner:
            buf += chunk
            i = buf.find(b"\n\n", buf.find(b"\n\n") + 2) if buf.count(b"\n\n") >= 2 else -1
            if i >= 0:
                yield buf[:i + 2]
                raise httpx.ReadError("cut")
        yield buf

    def close(self):
        self._inner.close()


class _CutWatch(httpx.BaseTransport):
    """Breaks the first watch stream after its first event; records each watch request's Last-Event-ID."""

    def __init__(self, inner):
        self._inner, self.resumes = inner, []

    def handle_request(self, request):
        res = self._inner.handle_request(request)
        if not request.url.path.endswith("/fs/watch") or res.status_code != 200:
            return res
        self.resumes.append(request.headers.get("Last-Event-ID", ""))
        if len(self.resumes) > 1:
            return res
        return httpx.Response(res.status_code, headers=res.headers, stream=_CutStream(res.stream), request=request)

    def close(self):
        self._inner.close()


@needs_runner
def test_watch_dir_resumes():
    with Sandbox.create(timeout=300) as sbx:
        sbx.commands.run("mkdir -p build")
        cut = _CutWatch(sbx._http.client._transport)
        sbx._http.client._transport = cut
        with sbx.files.watch_dir("build") as w:
            # Made while the stream drops: the resumed stream has it.
            sbx.commands.run("echo done > build/out.txt")
            seen = []
            for ev in w:
                seen.append((ev.type, ev.name))
                if ev.type == "written":
                    break
        assert seen == [("created", "out.txt"), ("written", "out.txt")]
        assert len(cut.resumes) == 2 and cut.resumes[0] == "" and "." in cut.resumes[1], cut.resumes


def test_org_calls_and_session_files():
    from sandboxd import download_file, info, quotas, session_files, upload_file, usage, volumes
    from sandboxd import async_info, async_quotas, async_session_files
    assert info()["backend"] == BACKEND
    assert any(q["name"] for q in quotas())
    assert isinstance(usage(), list) and isinstance(volumes(), list)
    r = run_code("py", "open('out.txt', 'w').write('hi')")
    assert [f["path"] for f in session_files(r.session_id)] == ["out.txt"]
    assert [f["path"] for f in upload_file(r.session_id, "in.csv", "a,b\n")] == ["in.csv"]
    assert download_file(r.session_id, "in.csv") == b"a,b\n"

    async def main():
        from sandboxd import async_download_file
        assert (await async_info())["backend"] == BACKEND
        assert await async_quotas()
        assert len(await async_session_files(r.session_id)) == 2
        assert await async_download_file(r.session_id, "out.txt") == b"hi"
    asyncio.run(main())


def test_async_lifecycle_calls():
    async def main():
        async with await AsyncSandbox.create(timeout=300) as sbx:
            await sbx.set_metadata({"suite": "py-async"})
            assert [s.id for s in await AsyncSandbox.list_sandboxes(metadata={"suite": "py-async"})] == [sbx.id]
            assert (await sbx.refresh()).metadata == {"suite": "py-async"}
            if "stats" in CAPS:
                assert (await sbx.stats())["processes"] >= 1
            assert await sbx.stop() >= 0
            await sbx.write("d/f.txt", "x")
            tar = await sbx.archive("d")
            assert (await sbx.extract("d2", tar))["entries"] >= 1
            assert await sbx.read("d2/f.txt") == b"x"
            await sbx.sleep()
            await sbx.wake()
            assert sbx.info.status == "running"
            if "runner" in CAPS:
                # A directory made after the wake: on kube a wake is a new pod, and an exec sandbox's
                # workdir is scratch (memoryKept: false).
                await sbx.run("mkdir -p w")
                async with sbx.watch_dir("w", recursive=True) as w:
                    await sbx.run("echo y > w/g.txt")
                    seen = []
                    async for ev in w:
                        seen.append((ev.type, ev.name))
                        if ev.type == "written":
                            break
                assert seen == [("created", "g.txt"), ("written", "g.txt")]
    asyncio.run(main())
