"""OCI images on the local runtime: every source, layer whiteouts, and the shared layer cache.

The image is built here with the real Docker engine (two layers, the second deleting a file and
adding one), then reached four ways: a `docker save` archive, an OCI image layout archive
(skopeo), the engine's own image store, and a real registry (Debian's docker-registry) on
loopback, pulled over the OCI distribution API.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from pomona import SandboxClient
from pomona.errors import ImageNotFound
from tests.conftest import docker_available

pytestmark = pytest.mark.skipif(
    not docker_available(), reason="needs a Docker engine to build the image"
)
IMAGE = "pomona-test/layered:1"


def _busybox_rootfs_tar(path: Path) -> None:
    root = path.parent / "bb-root"
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin/busybox")
    for applet in ("sh", "ls", "cat", "echo", "sleep", "rm", "mkdir", "touch", "test", "id", "wc"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('PRETTY_NAME="pomona busybox"\n')
    (root / "etc/removed-later").write_text("gone\n")
    subprocess.run(["tar", "-C", str(root), "-cf", str(path), "."], check=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("image")
    base = work / "base.tar"
    _busybox_rootfs_tar(base)
    subprocess.run(
        ["docker", "import", str(base), "pomona-test/layered-base:1"],
        check=True,
        capture_output=True,
    )
    (work / "Dockerfile").write_text(
        "FROM pomona-test/layered-base:1\n"
        "RUN rm /etc/removed-later && mkdir -p /opt/added && echo layer2 > /opt/added/file\n"
        "ENV POMONA_IMAGE_VAR=from-image\n"
    )
    subprocess.run(
        ["docker", "build", "-q", "-t", IMAGE, str(work)], check=True, capture_output=True
    )
    docker_archive = work / "docker-save.tar"
    subprocess.run(["docker", "save", "-o", str(docker_archive), IMAGE], check=True)
    oci_archive = work / "oci.tar"
    subprocess.run(
        ["skopeo", "copy", f"docker-archive:{docker_archive}", f"oci-archive:{oci_archive}"],
        check=True,
        capture_output=True,
    )
    return {"docker_archive": str(docker_archive), "oci_archive": str(oci_archive)}


@pytest.fixture(scope="module")
def registry(tmp_path_factory, built) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path_factory.mktemp("registry")
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    server = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        ref = f"127.0.0.1:{port}/pomona/layered:1"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--dest-tls-verify=false",
                f"docker-archive:{built['docker_archive']}",
                f"docker://{ref}",
            ],
            check=True,
            capture_output=True,
        )
        yield ref
    finally:
        server.terminate()
        server.wait()


@pytest.fixture
def client():
    state = tempfile.mkdtemp(prefix="pomona-images-")
    with SandboxClient("local", state_dir=state) as c:
        yield c
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(state).unmount_store()


def _check_layers(sb) -> None:
    assert sb.exec("cat /opt/added/file").stdout == "layer2\n"
    assert sb.exec("test -e /etc/removed-later").exit_code == 1  # the whiteout hides it
    assert sb.exec("cat /etc/os-release").stdout == 'PRETTY_NAME="pomona busybox"\n'
    assert sb.exec("echo $POMONA_IMAGE_VAR").stdout == "from-image\n"
    assert sb.exec("test -e /usr/bin/python3").exit_code == 1  # nothing of the host shows through


@pytest.mark.parametrize("source", ["docker_archive", "oci_archive"])
def test_archives(client, built, source):
    ref = ("docker-archive:" if source == "docker_archive" else "oci-archive:") + built[source]
    with client.create_sandbox(ref) as sb:
        _check_layers(sb)


def test_engine_image_store(client, built):
    with client.create_sandbox(IMAGE) as sb:
        _check_layers(sb)


def test_registry_pull(client, registry):
    with client.create_sandbox(registry) as sb:
        _check_layers(sb)


def test_layers_are_shared_between_images(client, built):
    a = client.create_sandbox("docker-archive:" + built["docker_archive"])
    b = client.create_sandbox("oci-archive:" + built["oci_archive"])
    try:
        layers = Path(client._async._runtime.images.root, "layers")
        assert len(list(layers.iterdir())) == 2  # same diff ids: unpacked once
    finally:
        a.delete()
        b.delete()


def test_unknown_image_says_where_it_looked(client):
    with pytest.raises(ImageNotFound, match="not in the local Docker image store"):
        client.create_sandbox("pomona-test/does-not-exist:1")
    with pytest.raises(ImageNotFound, match="does not exist"):
        client.create_sandbox("docker-archive:/nonexistent.tar")
