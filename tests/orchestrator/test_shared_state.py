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
    import asyncio
    import subprocess

    import pytest

    from pomona import AsyncSandboxClient
    from pomona.orchestrator.errors import SandboxFailed

    state = tempfile.mkdtemp(prefix="pomona-race-")

    raced = []

    async def race(i: int) -> None:
        async with AsyncSandboxClient("local", state_dir=state) as client:
            creating = asyncio.create_task(client.create_sandbox("host", sandbox_id=f"racy-{i}"))
            for _ in range(i):  # let the create get a little further each round
                await asyncio.sleep(0)
            deleted = await client.delete_sandbox(f"racy-{i}")
            raced.append(deleted)
            if deleted:
                with pytest.raises(SandboxFailed, match="deleted while"):
                    await creating
            else:
                await (await creating).delete()
            assert await client.list_sandboxes() == []

    try:
        for i in range(8):
            asyncio.run(race(i))
        assert any(raced), "no round deleted the sandbox mid-create: the race was not exercised"
        procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert "racy-" not in procs and "racy-" not in open("/proc/self/mounts").read()
    finally:
        runtime = LocalRuntime(state)
        runtime.unmount_store()
    from pathlib import Path

    from pomona.orchestrator.cgroups import ROOT, is_v2

    group = runtime.cgroup_group
    parents = [ROOT / group] if is_v2() else [ROOT / c / group for c in ("memory", "pids", "cpu")]
    assert not any(p.exists() for p in parents), "the runtime's parent cgroup outlived its state"
