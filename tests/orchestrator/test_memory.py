"""The memory runtime (a test double of the Runtime contract) keeps to the contract where the
service and the SDK rely on it, through the SDK in-process: exec semantics (stdin, caps, a
timeout that kills, a caller who stops listening), files and their errors, archives, snapshot
and fork, a sandbox whose init died, terminals, and ports that refuse."""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import tarfile

import pytest

from pomona import AsyncSandboxClient
from pomona.errors import (
    FileNotFoundInSandbox,
    InvalidRequest,
    PathOutsideSandbox,
    SandboxConflict,
)
from pomona.orchestrator.runtimes.memory import Command, MemoryRuntime


async def shell(command: Command) -> int:
    """A few commands, enough for these tests."""
    word, _, rest = command.text.partition(" ")
    if word == "echo":
        await command.write(rest + "\n")
    elif word == "cat":
        await command.write(await command.stdin.read())
    elif word == "flood":
        await command.write("x" * int(rest))
        await command.write("e", "stderr")
    elif word == "sleep":
        try:
            await asyncio.sleep(float(rest))
        except asyncio.CancelledError:  # killed: leave a mark the test can see
            command.sandbox.write("/killed", command.text.encode())
            raise
    elif word == "raise":
        raise RuntimeError("the handler broke")
    elif word == "repl":  # a terminal program: echoes each line until "exit"
        while (line := await command.stdin.readline()) and line != b"exit\n":
            await command.write(b"> " + line)
    return 0


def run(test) -> None:
    async def main() -> None:
        async with AsyncSandboxClient(MemoryRuntime(shell)) as client:
            await test(client, await client.create_sandbox("any/image:tag", labels={"t": "1"}))

    asyncio.run(main())


def test_exec_stdin_caps_and_timeouts():
    async def test(client, sb) -> None:
        assert (await sb.exec("echo hi")).stdout == "hi\n"
        assert (await sb.exec("cat", stdin="piped")).stdout == "piped"
        capped = await sb.exec("flood 100", output_cap=10)
        assert (capped.stdout, capped.stderr, capped.truncated) == ("x" * 10, "e", True)
        slow = await sb.exec("sleep 30", timeout=0.05)
        assert (slow.exit_code, slow.timed_out) == (-signal.SIGKILL, True)
        assert await sb.read_file("/killed") == b"sleep 30"
        await sb.remove("/killed")
        assert (await sb.exec("nothing-answers-this")).exit_code == 0  # the test's handler: 0
        with pytest.raises(RuntimeError, match="the handler broke"):
            await sb.exec("raise")
        stream = sb.exec_stream("sleep 31")
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.01)
        waiting.cancel()  # the caller stops listening: the command goes too
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await stream.aclose()
        assert await sb.read_file("/killed") == b"sleep 31"

    run(test)


def test_a_runtime_without_a_handler_says_so():
    async def main() -> None:
        async with AsyncSandboxClient(MemoryRuntime()) as client:
            result = await (await client.create_sandbox()).exec(["make", "test"])
            assert result.exit_code == 127 and "no handler answers 'make test'" in result.stderr

    asyncio.run(main())


def test_files_and_their_errors():
    async def test(client, sb) -> None:
        await sb.write_file("deep/dir/a.txt", "alpha", mode=0o600)
        assert await sb.read_file("/workspace/deep/dir/a.txt") == b"alpha"
        info = await sb.stat("deep/dir/a.txt")
        assert (info.type, info.size, info.mode, info.path) == (
            "file",
            5,
            0o600,
            "/workspace/deep/dir/a.txt",
        )
        assert [f.name for f in await sb.list_files("deep")] == ["dir"]
        with pytest.raises(FileNotFoundInSandbox):
            await sb.read_file("missing")
        with pytest.raises(InvalidRequest, match="is a directory"):
            await sb.read_file("deep")
        with pytest.raises(InvalidRequest, match="is a directory"):
            await sb.write_file("deep", b"x")
        with pytest.raises(InvalidRequest, match="not a directory"):
            await sb.list_files("deep/dir/a.txt")
        with pytest.raises(InvalidRequest, match="non-empty"):
            await sb.remove("deep")
        await sb.remove("deep", recursive=True)
        assert await sb.list_files(".") == []
        await sb.write_file("/../../etc/x", b"inside")  # `..` stops at the sandbox's root
        assert await sb.read_file("/etc/x") == b"inside"

    run(test)


def test_archives_in_and_out():
    async def test(client, sb) -> None:
        await sb.write_file("proj/pkg/mod.py", "X = 1\n")
        tar = await sb.download_dir("proj")
        names = tarfile.open(fileobj=io.BytesIO(tar)).getnames()
        assert names == ["./pkg", "./pkg/mod.py"]
        await sb.upload_dir("copy", tar)
        assert await sb.read_file("copy/pkg/mod.py") == b"X = 1\n"
        evil = io.BytesIO()
        with tarfile.open(fileobj=evil, mode="w") as out:
            out.addfile(tarfile.TarInfo("../escape"), io.BytesIO(b""))
        with pytest.raises(PathOutsideSandbox):
            await sb.upload_dir("copy", evil.getvalue())
        with pytest.raises(InvalidRequest, match="not a tar"):
            await sb.upload_dir("copy", b"plain bytes")

    run(test)


def test_snapshot_fork_and_a_snapshot_in_use():
    async def test(client, sb) -> None:
        await sb.write_file("state", "base")
        snap = await sb.snapshot()
        left, right = await client.fork(snap, 2, labels={"branch": "b"})
        await left.write_file("state", "left")
        assert [await s.read_file("state") for s in (sb, left, right)] == [
            b"base",
            b"left",
            b"base",
        ]
        assert (
            right.info.spec.labels == {"t": "1", "branch": "b"} and right.info.snapshot == snap.id
        )
        with pytest.raises(SandboxConflict, match="in use"):
            await client.delete_snapshot(snap)
        for s in (left, right):
            await s.delete()
        assert await client.delete_snapshot(snap) is True

    run(test)


def test_a_sandbox_whose_init_died():
    async def test(client, sb) -> None:
        client._runtime.sandboxes[sb.id].fail()
        assert (await sb.refresh()).status == "failed"
        with pytest.raises(SandboxConflict, match="has failed"):
            await sb.exec("echo no")
        assert await sb.delete() is True

    run(test)


def test_a_terminal_and_a_port():
    async def test(client, sb) -> None:
        pty = await sb.pty("repl", rows=30, cols=100)
        await pty.write(b"one\n")
        assert await pty.read(timeout=5) == b"> one\n"
        await pty.resize(40, 120)
        await pty.write(b"exit\n")
        assert await pty.wait(timeout=5) == 0
        assert await pty.read(timeout=5) == b""
        killed = await sb.pty("repl")
        await killed.signal(signal.SIGINT)
        assert await killed.wait(timeout=5) == -signal.SIGINT
        with pytest.raises(ConnectionRefusedError, match="port 8080"):
            await sb.connect(8080)

    run(test)
