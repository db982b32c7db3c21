"""The docker runtime drives Podman through its Docker-compatible socket: a smoke test, on a
Podman service of the test's own (tests/podman.py says how it is set up for this machine).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pomona import SandboxClient
from pomona.errors import SandboxNotFound
from tests.podman import IMAGE, PodmanUnavailable, podman_service


@pytest.fixture(scope="module")
def podman_socket() -> Iterator[str]:
    try:
        with podman_service() as (url, _):
            yield url
    except PodmanUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture
def podman_client(podman_socket: str, tmp_path: Path) -> Iterator[SandboxClient]:
    with SandboxClient(
        "podman", state_dir=str(tmp_path / "state"), base_url=podman_socket
    ) as client:
        yield client


def test_podman_exec_files_and_limits(podman_client):
    with podman_client.create_sandbox(
        IMAGE, memory="128Mi", pids=64, cpu=0.5, labels={"suite": "podman"}
    ) as sb:
        assert sb.info.runtime == "podman"
        r = sb.exec("echo hi; echo err >&2; id -u; pwd")
        assert (r.exit_code, r.stdout, r.stderr) == (0, "hi\n1000\n/workspace\n", "err\n")
        assert sb.exec("id -u", user="root").stdout == "0\n"
        assert sb.exec("cat", stdin="piped").stdout == "piped"
        slow = sb.exec("sleep 100 & sleep 100", timeout=1)
        assert slow.timed_out and slow.exit_code == -9
        assert sb.exec("ps -o args | grep -c '[s]leep 100'").stdout.strip() == "0"
        sb.write_file("/workspace/dir/a.txt", b"content")
        assert sb.read_file("/workspace/dir/a.txt") == b"content"
        assert [f.name for f in sb.list_files("/workspace/dir")] == ["a.txt"]
        assert (
            sb.exec(
                "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"
            ).stdout.strip()
            == "64"
        )
        assert [s.id for s in podman_client.list_sandboxes({"suite": "podman"})] == [sb.id]


def test_podman_snapshot_survives_its_sandbox(podman_client):
    sb = podman_client.create_sandbox(IMAGE)
    sb.write_file("/workspace/state.txt", b"v1")
    snap = sb.snapshot()
    sb.delete()
    left, right = podman_client.fork(snap, 2)
    try:
        left.write_file("/workspace/state.txt", b"left")
        assert right.read_file("/workspace/state.txt") == b"v1"
    finally:
        left.delete()
        right.delete()
    assert podman_client.delete_snapshot(snap) is True


def test_podman_network_none_and_gateway(podman_client):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"through-gateway")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    probe = f"nc -w 3 127.0.0.1 {port} </dev/null"
    try:
        with podman_client.create_sandbox(IMAGE, network="none") as sb:
            assert "through-gateway" not in sb.exec(probe, timeout=20).stdout
        with podman_client.create_sandbox(
            IMAGE, network="gateway", gateway=f"127.0.0.1:{port}"
        ) as sb:
            assert sb.exec(probe, timeout=20).stdout == "through-gateway"
    finally:
        server.close()


def test_podman_sandboxes_are_adopted_by_the_next_process(podman_socket, tmp_path):
    state = str(tmp_path / "state")
    first = SandboxClient("podman", state_dir=state, base_url=podman_socket, auto_cleanup=False)
    sandbox_id = first.create_sandbox(IMAGE, labels={"adopt": "me"}).id
    first.close()
    with SandboxClient("podman", state_dir=state, base_url=podman_socket) as second:
        assert [s.id for s in second.list_sandboxes({"adopt": "me"})] == [sandbox_id]
        assert second.get_sandbox(sandbox_id).exec("echo adopted").stdout == "adopted\n"
        assert second.delete_sandbox(sandbox_id) is True
        with pytest.raises(SandboxNotFound):
            second.get_sandbox(sandbox_id)
