"""Progress lines of long commands: drawn on a terminal, absent from pipes and logs."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import pty
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pomona.orchestrator.linux.images import ImageStore


def resolve(store: Path, ref: str) -> Any:
    """ImageStore.resolve on a thread of its own: Playwright's sync API (other tests of this
    session) keeps an event loop running on the main thread, where asyncio.run refuses."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, ImageStore(store).resolve(ref)).result()


def _docker_save(path: Path, layer_bytes: int) -> None:
    """A `docker save` archive of one layer holding one file of `layer_bytes` random bytes."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("data.bin")
        info.size = layer_bytes
        tar.addfile(info, io.BytesIO(os.urandom(layer_bytes)))
    diff_id = "sha256:" + hashlib.sha256(layer.getvalue()).hexdigest()
    config = {"rootfs": {"type": "layers", "diff_ids": [diff_id]}, "config": {"Env": ["A=1"]}}
    members = {
        "layer.tar": layer.getvalue(),
        "config.json": json.dumps(config).encode(),
        "manifest.json": json.dumps([{"Config": "config.json", "Layers": ["layer.tar"]}]).encode(),
    }
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_image_unpack_draws_bytes_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    archive = tmp_path / "image.tar"
    _docker_save(archive, 3 * 2**20)
    monkeypatch.setenv("POMONA_PROGRESS", "1")
    image = resolve(tmp_path / "store", f"docker-archive:{archive}")
    assert (
        image.env == {"A": "1"} and (Path(image.layers[0]) / "data.bin").stat().st_size == 3 * 2**20
    )
    drawn = capsys.readouterr().err
    assert "unpacking layer" in drawn and "MB" in drawn


def test_no_progress_line_off_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("POMONA_PROGRESS", raising=False)
    archive = tmp_path / "image.tar"
    _docker_save(archive, 2**16)
    resolve(tmp_path / "store", f"docker-archive:{archive}")
    assert capsys.readouterr().err == ""


def _on_a_terminal(args: list[str]) -> str:
    """Run a command with a pseudo-terminal as its stdout and stderr; all it wrote."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "POMONA_PROGRESS"}
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(600)
    os.close(leader)
    return out.decode("utf-8", "replace")


def test_payload_install_draws_a_line_on_a_terminal_only() -> None:
    from pomona.harnesses import payload

    if payload.ensure(["pi"]):
        pytest.skip("the pi harness payload is unavailable")
    command = [sys.executable, "-m", "pomona.cli", "harnesses", "install", "pi"]
    assert "harness payload" in _on_a_terminal(command)
    piped = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0 and "harness payload" not in piped.stdout + piped.stderr


def test_snapshot_of_a_workspace_draws_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from pomona import SandboxClient
    from pomona.orchestrator.runtimes.local import LocalRuntime

    monkeypatch.setenv("POMONA_PROGRESS", "1")
    state = tmp_path / "state"
    try:
        with (
            SandboxClient("local", state_dir=str(state)) as client,
            client.create_sandbox("host", network="none") as sandbox,
        ):
            assert (
                sandbox.exec("head -c 8000000 /dev/urandom > /workspace/big", timeout=120).exit_code
                == 0
            )
            snapshot = sandbox.snapshot()
            client.delete_snapshot(snapshot.id)
    finally:
        LocalRuntime(str(state)).unmount_store()
    drawn = capsys.readouterr().err
    assert f"snapshot {snapshot.id}" in drawn
