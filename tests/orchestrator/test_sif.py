"""Apptainer/Singularity images on the local runtime, without Apptainer: a real SIF file (written
from the format's specification around mksquashfs's squashfs) and a sandbox directory run as
sandboxes, cached by digest; malformed and unsupported SIFs are refused in words; behind the
service, SIF paths obey --image-dir like archives."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from pomona import SandboxClient
from pomona.errors import InvalidRequest, SourceNotAllowed
from pomona.orchestrator.linux import sif
from pomona.orchestrator.sources import ImageSources, sif_path
from tests.conftest import docker_available
from tests.orchestrator.sif_files import busybox_tree, squashfs, write_sif

pytestmark = pytest.mark.skipif(
    not shutil.which("mksquashfs") or os.geteuid() != 0,
    reason="needs squashfs-tools (./dev setup) and root (the local runtime)",
)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("sif")
    tree = busybox_tree(work / "tree")
    part = squashfs(tree, work / "rootfs.squashfs")
    return {"tree": tree, "part": part, "sif": write_sif(part, work / "image.sif")}


@pytest.fixture(scope="module")
def client():
    state = tempfile.mkdtemp(prefix="pomona-sif-")
    with SandboxClient("local", state_dir=state) as c:
        yield c
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(state).unmount_store()


def _runs_the_image(sb) -> None:
    assert sb.exec("cat /etc/os-release").stdout == 'PRETTY_NAME="pomona sif"\n'
    assert sb.exec("test -e /usr/bin/python3").exit_code == 1  # nothing of the host shows
    # the OCI env Apptainer wrote, with its ${NAME:-"default"} form, and %environment literals;
    # shell code there ($(id -un)) is not run
    env = sb.exec("env").stdout.splitlines()
    assert "GREETING=hello from sif" in env and "PROJECT=pomona" in env
    assert not any(line.startswith("WHO=") for line in env)
    assert sb.exec("test -e /etc/kmsg-copy").exit_code == 1  # device nodes are dropped
    sb.write_file("/tmp/x", b"written")  # an overlay: the image stays read-only below
    assert sb.read_file("/tmp/x") == b"written"


def test_sif_file_runs_as_a_sandbox_and_is_cached_by_digest(client, images, tmp_path):
    with client.create_sandbox(str(images["sif"])) as sb:  # by suffix
        _runs_the_image(sb)
    store = client._async._runtime.images
    (layer,) = [p for p in (store.root / "layers").iterdir() if not p.name.startswith(".")]
    with open(images["sif"], "rb") as f:
        expected = sif.partition_digest(f.fileno(), sif.read_partition(f.fileno(), "x"))
    assert layer.name == expected.split(":")[1]  # keyed by the partition's sha256
    # the same filesystem in another SIF file (another uuid): the same digest, unpacked once
    again = write_sif(images["part"], tmp_path / "copy.sif")
    with client.create_sandbox(f"sif:{again}") as sb:
        assert sb.exec("cat /etc/os-release").exit_code == 0
    assert len([p for p in (store.root / "layers").iterdir() if not p.name.startswith(".")]) == 1
    assert {r["digest"] for r in store.cached()} == {expected}


def test_a_changed_sif_is_used_at_once(client, images, tmp_path):
    tree = busybox_tree(tmp_path / "tree2")
    (tree / "etc/os-release").write_text('PRETTY_NAME="second build"\n')
    path = tmp_path / "rebuilt.sif"
    write_sif(images["part"], path)
    with client.create_sandbox(f"sif:{path}") as sb:
        assert "pomona sif" in sb.exec("cat /etc/os-release").stdout
    write_sif(squashfs(tree, tmp_path / "second.squashfs"), path)  # rebuilt under the same name
    with client.create_sandbox(f"sif:{path}") as sb:
        assert sb.exec("cat /etc/os-release").stdout == 'PRETTY_NAME="second build"\n'


def test_sandbox_directory(client, images, tmp_path):
    tree = tmp_path / "sandbox"
    subprocess.run(["cp", "-a", str(images["tree"]), str(tree)], check=True)  # device node too
    with client.create_sandbox(f"sif:{tree}") as sb:
        _runs_the_image(sb)
    (tree / "etc/added").write_text("later\n")  # a change in the tree is a new digest
    with client.create_sandbox(f"sif:{tree}") as sb:
        assert sb.exec("cat /etc/added").stdout == "later\n"


def _patched(source: Path, out: Path, at: int, data: bytes) -> Path:
    blob = bytearray(source.read_bytes())
    blob[at : at + len(data)] = data
    out.write_bytes(bytes(blob))
    return out


def test_bad_sif_files_are_refused_in_words(client, images, tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"junk" * 64)
    cases = {
        "not a SIF file": _patched(images["sif"], tmp_path / "a.sif", 32, b"NOT_MAGIC\x00"),
        "version": write_sif(images["part"], tmp_path / "b.sif", version=b"02"),
        "ext3": write_sif(images["part"], tmp_path / "c.sif", fstype=2),
        "encrypted": write_sif(images["part"], tmp_path / "d.sif", fstype=5),
        "no primary system partition": write_sif(images["part"], tmp_path / "e.sif", parttype=3),
        "built for aarch64": write_sif(images["part"], tmp_path / "f.sif", arch=b"04"),
        # the descriptor table claims more entries than the file holds (descriptors total)
        "outside the file": _patched(
            images["sif"], tmp_path / "g.sif", 88, struct.pack("<qqq", 4000, 4096, 4000 * 585)
        ),
        # a partition whose bytes are not a squashfs
        "not a squashfs": write_sif(junk, tmp_path / "h.sif"),
    }
    layers = client._async._runtime.images.root / "layers"
    before = sorted(layers.iterdir()) if layers.exists() else []
    for words, path in cases.items():
        with pytest.raises(InvalidRequest, match=words):
            client.create_sandbox(f"sif:{path}")
    assert (sorted(layers.iterdir()) if layers.exists() else []) == before  # nothing half-made


def test_sif_refs_obey_the_services_image_dirs(images, tmp_path):
    assert sif_path(str(images["sif"])) == str(images["sif"])
    assert sif_path("debian:12") is None and sif_path("name.sif") is None  # a name, not a path
    allowed = ImageSources.restricted(archive_dirs=[str(images["sif"].parent)])
    allowed.check(f"sif:{images['sif']}")
    with pytest.raises(SourceNotAllowed, match="--image-dir"):
        allowed.check(f"sif:{tmp_path}/elsewhere.sif")
    fifo = images["sif"].parent / "fifo.sif"
    os.mkfifo(fifo)
    with pytest.raises(InvalidRequest, match="not a regular file"):
        allowed.open_archive(f"sif:{fifo}", directory=True)


@pytest.mark.skipif(not docker_available(), reason="needs a Docker engine")
def test_the_docker_runtime_refuses_a_sif_in_words(images):
    with (
        SandboxClient("docker", state_dir=tempfile.mkdtemp(prefix="pomona-sif-docker-")) as c,
        pytest.raises(InvalidRequest, match="the local runtime unpacks those"),
    ):
        c.create_sandbox(f"sif:{images['sif']}")
