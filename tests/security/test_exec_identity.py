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
    """The kernel recycles pids: A's init dies and its number comes back as a process of B.
    Simulated exactly: A's stored pid (and start time) become those of B's init."""
    runtime = local_client._async._runtime
    with local_client.create_sandbox("host") as a, local_client.create_sandbox("host") as b:
        a_live, b_live = runtime.sandboxes[a.id], runtime.sandboxes[b.id]
        watch = os.pidfd_open(a_live.record.init_pid)
        try:
            os.kill(a_live.record.init_pid, signal.SIGKILL)
            _wait_dead(watch)
        finally:
            os.close(watch)
        a_live.record.init_pid, a_live.record.init_start = (
            b_live.record.init_pid,
            b_live.record.init_start,
        )
        with pytest.raises(SandboxConflict, match="failed"):
            a.exec("hostname")
        assert a.refresh().status == "failed"
        assert b.exec("hostname").stdout.strip() == b.id  # B is untouched


def _wait_failed(sb) -> None:
    for _ in range(1200):  # its init is gone within moments; the bound is only a backstop
        if sb.refresh().status == "failed":
            break
        time.sleep(0.05)
    assert sb.refresh().status == "failed"
    with pytest.raises(PomonaError, match="failed"):
        sb.exec("true")


@pytest.mark.parametrize("transport", ["local", "http"])
def test_root_inside_cannot_kill_the_init_and_a_dead_init_is_failed(request, transport):
    """`kill -9 -1` as root inside ends every process of the sandbox but its init, which no
    signal from inside reaches: the sandbox stays ready. An init that dies (killed from the
    host here) makes it `failed`, never `ready`."""
    client = request.getfixturevalue("local_client" if transport == "local" else "remote_client")
    sb = client.create_sandbox("host", user="root")
    try:
        sb.exec("sleep 300 > /dev/null 2>&1 &")
        with contextlib.suppress(PomonaError):  # the exec dies with the rest
            sb.exec("kill -9 -1; kill -9 1; kill -KILL 1", timeout=60)
        assert sb.refresh().status == "ready"
        left = sb.exec("ps -eo pid,args --no-headers").stdout
        assert left.split()[:2] == ["1", "pomona-init"] and "sleep 300" not in left, left
        if transport == "local":
            os.kill(client._async._runtime.sandboxes[sb.id].record.init_pid, signal.SIGKILL)
            _wait_failed(sb)
    finally:
        assert sb.delete() is True


def test_root_inside_killing_every_process_makes_a_docker_sandbox_failed(docker_client):
    from tests.images import debian_image

    sb = docker_client.create_sandbox(debian_image(), user="root")
    try:
        with contextlib.suppress(PomonaError):  # the exec dies with the sandbox
            sb.exec("kill -9 -1", timeout=60)  # all but the init, which exits with its last child
        _wait_failed(sb)
    finally:
        assert sb.delete() is True
