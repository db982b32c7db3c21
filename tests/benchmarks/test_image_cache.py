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
