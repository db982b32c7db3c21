"""Two clients on one state directory (two processes of one user, or a service and a CLI)."""

from __future__ import annotations

import socket
import tempfile

from pomona import SandboxClient
from pomona.orchestrator.runtimes.local import LocalRuntime


def test_second_client_adopts_a_gateway_sandbox_the_first_still_serves():
    state = tempfile.mkdtemp(prefix="pomona-shared-")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        with SandboxClient("local", state_dir=state) as first:
            sb = first.create_sandbox("host", network="gateway", gateway=f"127.0.0.1:{port}")
            with SandboxClient("local", state_dir=state, auto_cleanup=False) as second:
                assert sb.id in {s.id for s in second.list_sandboxes()}
                assert second.get_sandbox(sb.id).exec("echo shared").stdout == "shared\n"
            assert sb.exec("echo still-first").stdout == "still-first\n"
    finally:
        server.close()
        LocalRuntime(state).unmount_store()


def test_delete_while_creating_leaves_nothing_behind():
    """A delete that arrives while the sandbox is being built waits for the build, tears down
    once, and the create fails saying so; nothing (process, mount, cgroup) is left."""
    import asyncio
    import subprocess
    import threading
    from pathlib import Path

    import pytest

    from pomona import AsyncSandboxClient
    from pomona.errors import SandboxFailed
    from pomona.orchestrator.linux.cgroups import ROOT, is_v2

    state = tempfile.mkdtemp(prefix="pomona-race-")

    async def race() -> None:
        async with AsyncSandboxClient("local", state_dir=state) as client:
            runtime = client._runtime
            build, started, release = runtime._build, threading.Event(), threading.Event()

            def held_build(live, spec):  # the build pauses until the delete is in flight
                started.set()
                release.wait(30)
                return build(live, spec)

            runtime._build = held_build
            creating = asyncio.create_task(client.create_sandbox("host", sandbox_id="racy"))
            assert await asyncio.to_thread(started.wait, 30)
            deleting = asyncio.create_task(client.delete_sandbox("racy"))
            await asyncio.sleep(0.1)
            assert not deleting.done()  # it waits for the build, it does not tear down under it
            release.set()
            assert await deleting is True
            with pytest.raises(SandboxFailed, match="deleted while"):
                await creating
            assert await client.list_sandboxes() == []

    try:
        asyncio.run(race())
        procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert "racy" not in procs and "racy" not in open("/proc/self/mounts").read()
    finally:
        runtime = LocalRuntime(state)
        runtime.unmount_store()
    group = runtime.cgroup_group
    parents = [ROOT / group] if is_v2() else [ROOT / c / group for c in ("memory", "pids", "cpu")]
    assert not any(Path(p).exists() for p in parents), (
        "the runtime's parent cgroup outlived its state"
    )
