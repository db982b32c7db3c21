"""A Podman API service for tests, started on a socket in a temporary directory (not
/run/podman/podman.sock, so a service the machine already runs is left alone), with a
containers.conf of its own: the runc runtime (crun fails on this machine's cgroup setup),
ulimits the machine allows (Podman's defaults exceed them), and each exec's monitor (conmon) kept
30 s after the exec ends instead of Podman's 300, so a run leaves no process behind for minutes.
See reference/machine.md. Its image is a 2 MB static busybox one, imported with `podman import`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

IMAGE = "localhost/pomona-test/busybox:latest"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
exit_command_delay = 30
"""


class PodmanUnavailable(Exception):
    """Podman cannot run here; the message says why (tests skip with it)."""


def why_podman_cannot_run() -> str | None:
    if not shutil.which("podman"):
        return "podman is not installed (apt-get install podman runc)"
    if not shutil.which("runc"):
        return "runc is not installed (podman needs it here: crun fails on this cgroup setup)"
    if os.geteuid() != 0:
        return "the podman tests run a rootful podman service and need root"
    if not os.path.exists("/bin/busybox"):
        return "/bin/busybox (busybox-static) is needed to build the test image"
    return None


def podman(env: dict[str, str], *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=env, capture_output=True, **kwargs)


def build_busybox_image(env: dict[str, str], workdir: Path) -> None:
    """A 2 MB image: static busybox and its applet links, imported with `podman import`."""
    if podman(env, "image", "exists", IMAGE).returncode == 0:
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
    done = podman(
        env, "import", "-q", "-c", "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin", "-", IMAGE, input=tar
    )
    if done.returncode:
        raise PodmanUnavailable(f"podman import failed: {done.stderr.decode().strip()}")


def _answers(sock: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(str(sock))
        probe.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
        return b"OK" in probe.recv(1024)
    except OSError:
        return False
    finally:
        probe.close()


@contextlib.contextmanager
def podman_service() -> Iterator[tuple[str, dict[str, str]]]:
    """(the service's unix:// URL, the environment its `podman` commands need), with the busybox
    image in its store; stopped and removed on exit. PodmanUnavailable says why it cannot run."""
    reason = why_podman_cannot_run()
    if reason:
        raise PodmanUnavailable(reason)
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
        while not (sock.exists() and _answers(sock)):
            if service.poll() is not None:
                raise PodmanUnavailable(
                    "podman's API service cannot run here: "
                    + (workdir / "service.log").read_text().strip()[-500:]
                )
            if time.monotonic() > deadline:
                raise PodmanUnavailable("podman's API service did not answer /_ping within 30 s")
            time.sleep(0.1)
        build_busybox_image(env, workdir)
        yield f"unix://{sock}", env
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
