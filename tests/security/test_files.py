"""The files API against hostile trees: FIFOs, devices and sockets are refused instead of read
(one blocked read used to hold a server thread forever), no tenant can hold every worker, and no
depth of tree breaks delete, download or teardown."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import signal
import tempfile
from pathlib import Path

import pytest

from pomona import SandboxClient
from pomona.errors import InvalidRequest, PomonaError
from pomona.orchestrator.server.coordinator import Principal
from pomona.orchestrator.server.policy import TenantPolicy

DEPTH = 1500
DEEP = "mkdir -p /workspace/" + "/".join(["d"] * DEPTH)


@pytest.fixture(params=["local", "docker", "http"])
def runtime_client(request: pytest.FixtureRequest) -> tuple[SandboxClient, str]:
    if request.param == "docker":
        from tests.images import debian_image

        return request.getfixturevalue("docker_client"), debian_image()
    return request.getfixturevalue(
        f"{'local' if request.param == 'local' else 'remote'}_client"
    ), "host"


def _bounded(call, *args):
    """Run a call that, unfixed, blocks forever: the test fails instead of hanging the suite."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(call, *args)
        try:
            return future.result(timeout=300)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"{call.__name__} blocked (a FIFO opened for reading waits for a writer)")


@pytest.mark.parametrize("in_process", ["local", "docker"], indirect=True)
def test_a_fifo_is_refused_not_waited_on(in_process):
    client, image = in_process
    with client.create_sandbox(image) as sb:
        assert sb.exec(
            "mkfifo /workspace/pipe && mkdir /workspace/dir && mkfifo /workspace/dir/pipe"
        ).ok
        for call, args in (
            (sb.read_file, ("/workspace/pipe",)),
            (sb.write_file, ("/workspace/pipe", b"x")),
            (sb.download_dir, ("/workspace/pipe",)),
        ):
            with pytest.raises(InvalidRequest, match="not a regular file"):
                _bounded(call, *args)
        _bounded(sb.download_dir, "/workspace/dir")  # a FIFO inside a tree is skipped


def test_fifo_reads_by_one_tenant_never_stall_another(tenant):
    alice, bob = tenant("alice"), tenant("bob")
    assert (
        alice.post("/sandboxes", json={"image": "host", "sandbox_id": "fifo-attack"}).status_code
        == 200
    )
    assert (
        bob.post("/sandboxes", json={"image": "host", "sandbox_id": "fifo-victim"}).status_code
        == 200
    )
    try:
        alice.post(
            "/sandboxes/fifo-attack/exec", json={"command": "mkfifo /workspace/p", "wait": True}
        )
        bob.post(
            "/sandboxes/fifo-victim/files", json={"path": "/workspace/a.txt", "content": "aGk="}
        )
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            attacks = [
                pool.submit(
                    alice.get, "/sandboxes/fifo-attack/files", params={"path": "/workspace/p"}
                )
                for _ in range(16)
            ]
            victim = bob.get("/sandboxes/fifo-victim/files", params={"path": "/workspace/a.txt"})
            statuses = {f.result(timeout=300).status_code for f in attacks}
        assert victim.status_code == 200 and victim.json()["content"] == "aGk="
        assert statuses <= {422, 503}  # refused, or turned away by the per-key bound
    finally:
        alice.delete("/sandboxes/fifo-attack")
        bob.delete("/sandboxes/fifo-victim")


def test_file_operations_are_bounded_per_key():
    async def scenario() -> None:
        policy = TenantPolicy(file_ops_per_key=2)
        alice, bob = Principal("alice"), Principal("bob")
        async with policy.file_slot(alice), policy.file_slot(alice):
            with pytest.raises(PomonaError, match="file operations of this key"):
                async with policy.file_slot(alice):
                    pass
            async with policy.file_slot(bob):  # another key is not affected
                pass

    asyncio.run(scenario())


def test_a_deep_tree_is_deleted_downloaded_and_torn_down(runtime_client):
    client, image = runtime_client
    sb = client.create_sandbox(image)
    try:
        assert sb.exec(DEEP, timeout=300).ok
        sb.remove("/workspace/d", recursive=True)
        assert sb.list_files("/workspace") == []
        assert sb.exec(DEEP, timeout=300).ok
        assert len(sb.download_dir("/workspace")) > DEPTH * 512  # one tar header per directory
    finally:
        assert sb.delete() is True  # teardown walks the same tree


def test_a_deep_tree_left_by_a_crash_does_not_break_the_next_client():
    """A sandbox whose owner and init both died, with a deep tree: the next client on the state
    dir tears it down at start (unfixed, RecursionError made every start fail from then on)."""
    state = tempfile.mkdtemp(prefix="security-deep-")
    first = SandboxClient("local", state_dir=state, auto_cleanup=False)
    sb = first.create_sandbox("host")
    assert sb.exec(DEEP, timeout=300).ok
    init = first._async._runtime.sandboxes[sb.id].record.init_pid
    first.close()  # the sandbox stays, as after a crash of its owner
    watch = os.pidfd_open(init)
    try:
        os.kill(init, signal.SIGKILL)
        assert select.select([watch], [], [], 300)[0]
    finally:
        os.close(watch)
    with SandboxClient("local", state_dir=state) as second:
        assert second.list_sandboxes() == []
        assert not (Path(state) / "store" / "sandboxes" / sb.id).exists()
