"""The docker runtime drives Podman through its Docker-compatible socket: a smoke test.

The fixture starts its own `podman system service` on a socket in a temporary directory (not
/run/podman/podman.sock, so a service the machine already runs is left alone), with a
containers.conf of its own: the runc runtime (crun fails on this machine's cgroup setup),
ulimits the machine allows (Podman's defaults exceed them), and each exec's monitor (conmon) kept
30 s after the exec ends instead of Podman's 300, so a run leaves no process behind for minutes.
See reference/machine.md.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pomona import SandboxClient
from pomona.errors import SandboxNotFound

IMAGE = "localhost/pomona-test/busybox:latest"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
exit_command_delay = 30
"""


def _why_podman_cannot_run() -> str | None:
    if not shutil.which("podman"):
        return "podman is not installed (apt-get install podman runc)"
    if not shutil.which("runc"):
        return "runc is not installed (podman needs it here: crun fails on this cgroup setup)"
    if os.geteuid() != 0:
        return "the podman smoke test runs a rootful podman service and needs root"
    if not os.path.exists("/bin/busybox"):
        return "/bin/busybox (busybox-static) is needed to build the test image"
    return None


def _podman(env: dict[str, str], *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=env, capture_output=True, **kwargs)


def _build_busybox_image(env: dict[str, str], workdir: Path) -> None:
    """A 2 MB image: static busybox and its applet links, imported with `podman import`."""
    if _podman(env, "image", "exists", IMAGE).returncode == 0:
        return
    root = workdir / "rootfs"
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "tmp", "etc", "home", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    applets = subprocess.run(
        ["/bin/busybox", "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        link = root / applet
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\npomona:x:1000:1000:pomona:/home/pomona:/bin/sh\n"
    )
    (root / "etc/group").write_text("root:x:0:\npomona:x:1000:\n")
    tar = subprocess.run(
        ["tar", "-C", str(root), "-c", "."], capture_output=True, check=True
    ).stdout
    done = _podman(
        env, "import", "-q", "-c", "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin", "-", IMAGE, input=tar
    )
    if done.returncode:
        pytest.skip(f"podman import failed: {done.stderr.decode().strip()}")


@pytest.fixture(scope="module")
def podman_socket() -> Iterator[str]:
    reason = _why_podman_cannot_run()
    if reason:
        pytest.skip(reason)
    workdir = Path(tempfile.mkdtemp(prefix="pomona-podman-"))
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    sock = workdir / "podman.sock"
    log = open(workdir / "service.log", "wb")
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if service.poll() is not None:
                pytest.skip(
                    "podman's API service cannot run here: "
                    + (workdir / "service.log").read_text().strip()[-500:]
                )
            if sock.exists():
                probe = socket.socket(socket.AF_UNIX)
                try:
                    probe.connect(str(sock))
                    probe.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
                    if b"OK" in probe.recv(1024):
                        break
                except OSError:
                    pass
                finally:
                    probe.close()
            if time.monotonic() > deadline:
                pytest.skip("podman's API service did not answer /_ping within 30 s")
            time.sleep(0.1)
        _build_busybox_image(env, workdir)
        yield f"unix://{sock}"
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


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
