"""Exec always runs in the sandbox it names: a sandbox whose init died is `failed`, never
`ready`, and a stored pid that the kernel has given to another sandbox's process leads nowhere."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

import pytest

from pomona.errors import PomonaError, SandboxConflict


def _wait_dead(pidfd: int) -> None:
    assert select.select([pidfd], [], [], 300)[0], "the killed process did not exit"


def test_a_recycled_pid_never_runs_a_command_in_another_sandbox(local_client):
    """The kernel recycles pids: A's idle process dies and its number comes back as a process of
    B. Simulated exactly: A's stored pid (and start time) become those of B's idle process."""
    runtime = local_client._async._runtime
    with local_client.create_sandbox("host") as a, local_client.create_sandbox("host") as b:
        a_live, b_live = runtime.sandboxes[a.id], runtime.sandboxes[b.id]
        watch = os.pidfd_open(a_live.record.init_pid)
        try:
            os.kill(a_live.record.idle_pid, signal.SIGKILL)
            _wait_dead(watch)
        finally:
            os.close(watch)
        a_live.record.idle_pid = b_live.record.idle_pid
        a_live.record.idle_start = b_live.record.idle_start
        a_live.record.init_pid, a_live.record.init_start = (
            b_live.record.init_pid,
            b_live.record.init_start,
        )
        with pytest.raises(SandboxConflict, match="failed"):
            a.exec("hostname")
        assert a.refresh().status == "failed"
        assert b.exec("hostname").stdout.strip() == b.id  # B is untouched


@pytest.mark.parametrize("transport", ["local", "docker", "http"])
def test_root_inside_killing_every_process_makes_the_sandbox_failed(request, transport):
    if transport == "docker":
        from tests.images import debian_image

        client, image = request.getfixturevalue("docker_client"), debian_image()
    else:
        client, image = (
            request.getfixturevalue(f"{'local' if transport == 'local' else 'remote'}_client"),
            "host",
        )
    sb = client.create_sandbox(image, user="root")
    try:
        with contextlib.suppress(PomonaError):  # the exec dies with the sandbox
            sb.exec("kill -9 -1", timeout=60)  # all but the init, which exits with its last child
        for _ in range(1200):  # its init is gone within moments; the bound is only a backstop
            if sb.refresh().status == "failed":
                break
            time.sleep(0.05)
        assert sb.refresh().status == "failed"
        with pytest.raises(PomonaError, match="failed"):
            sb.exec("true")
    finally:
        assert sb.delete() is True
