"""The local runtime's image cache is keyed by digest: an image rebuilt under the same name is
used at once (SWE-bench images are rebuilt and re-tagged under fixed names), and `pomona images
list|remove|prune` shows and frees the cache without touching what live sandboxes stack."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pomona import SandboxClient
from pomona.cli import main
from pomona.orchestrator.runtimes.local import LocalRuntime

REF = "pomona-test/rebuilt:1"
BASE = "pomona-test/busybox-base:1"


@pytest.fixture(scope="module")
def base(tmp_path_factory: Any) -> str:
    """A two-megabyte base image: static busybox as sh, cat and echo."""
    root = tmp_path_factory.mktemp("rootfs")
    (root / "bin").mkdir()
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for applet in ("sh", "cat", "echo"):
        (root / "bin" / applet).symlink_to("busybox")
    tar = root.parent / "busybox-rootfs.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    subprocess.run(["docker", "import", str(tar), BASE], check=True, capture_output=True)
    return BASE


def build(marker: str, context: Path) -> str:
    (context / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo {marker} > /marker\n")
    subprocess.run(
        ["docker", "build", "-q", "-t", REF, str(context)], check=True, capture_output=True
    )
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", REF],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


@pytest.fixture
def state() -> Any:
    path = tempfile.mkdtemp(prefix="pomona-imgcache-")
    yield path
    LocalRuntime(path).unmount_store()
    shutil.rmtree(path, ignore_errors=True)


def test_a_rebuilt_image_replaces_the_cached_one(
    base: str, state: str, tmp_path: Path, capsys: Any
) -> None:
    with SandboxClient("local", state_dir=state) as client:
        first = build("one", tmp_path)
        with client.create_sandbox(REF) as sb:
            assert sb.exec("cat /marker").stdout == "one\n"
        second = build("two", tmp_path)
        assert second != first
        with client.create_sandbox(REF) as sb:
            assert sb.exec("cat /marker").stdout == "two\n"
            assert main(["images", "list", "--state-dir", state]) == 0
            listed = capsys.readouterr().out
            assert REF in listed and second[:19] in listed and first[:19] not in listed
            # the first build's own layer is freed; what the live sandbox stacks is not
            assert main(["images", "prune", "--state-dir", state]) == 0
            assert "pruned 1 digests and 1 layers" in capsys.readouterr().out
            assert sb.exec("cat /marker").stdout == "two\n"
        assert main(["images", "remove", REF, "--state-dir", state]) == 0
        assert main(["images", "remove", REF, "--state-dir", state]) == 1
        assert f"not cached: {REF}" in capsys.readouterr().out
        assert main(["images", "list", "--state-dir", state]) == 0
        assert REF not in capsys.readouterr().out
        assert main(["images", "prune", "--state-dir", state]) == 0
        with client.create_sandbox(REF) as sb:  # forgotten and pruned: fetched again on use
            assert sb.exec("cat /marker").stdout == "two\n"


@pytest.fixture
def registry(tmp_path: Path) -> Any:
    """A real registry (Debian's docker-registry) on a free loopback port."""
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    server = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:  # it serves once it listens; a dead server ends the wait
            assert server.poll() is None, "docker-registry exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def test_a_missing_swe_image_is_pulled_from_a_reachable_registry(
    base: str, registry: str, tmp_path: Path
) -> None:
    from pomona.benchmarks.swebench import images as swe_images

    build("pulled", tmp_path)
    image = f"{registry}/swebench/sweb.eval.x86_64.pomona_1776_pulled-1:latest"
    subprocess.run(
        ["skopeo", "copy", "--dest-tls-verify=false", f"docker-daemon:{REF}", f"docker://{image}"],
        check=True,
        capture_output=True,
    )
    subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
    said: list[str] = []
    assert (
        swe_images.ensure([{"instance_id": "pomona__pulled-1", "image": image}], say=said.append)
        == {}
    )
    assert any("pulling" in line for line in said)
    assert (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    )
    subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
