"""The Python SDK against a real server (SANDBOX_URL, SANDBOX_KEY): run by
sdk/sdk_test.go, which starts one."""

import asyncio
import time

import pytest

from sandboxd import AsyncSandbox, NotFoundError, Sandbox, SandboxError, run_code


def test_sync_sandbox():
    with Sandbox.create(timeout=300) as sbx:
        assert sbx.info.kind == "sandbox" and sbx.info.status == "running"
        assert sbx.info.expires_at - time.time() > 290

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
        kinds = []
        for e in sbx.logs("build"):
            kinds.append(e.kind)
            if e.kind == "exit":
                break
        assert "stdout" in kinds

        sbx.set_timeout(600)
        assert sbx.info.expires_at - time.time() > 590
        sbx.pause()
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
