"""One state directory, many processes (issue 22's race: AsyncVectorEnv with 4 workers failed
11 of 11 resets with "already mounted or mount point busy" and left the store mounted), and a
store no bigger than its disk. `local` only: the other runtimes keep no store of their own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from pomona.orchestrator.runtimes.local import LocalRuntime
from tests.conftest import leftovers

WORKER = textwrap.dedent("""
    import sys, time
    from pomona import SandboxClient
    start = float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))  # every worker starts on the fresh dir at once
    with SandboxClient("local", state_dir=sys.argv[1]) as client:
        with client.create_sandbox("host") as sandbox:
            print(sandbox.exec("echo reset").stdout.strip(), flush=True)
""")


def test_many_processes_start_on_one_fresh_state_dir_at_once():
    state = tempfile.mkdtemp(prefix="pomona-many-")
    start = time.time() + 3  # all interpreters are up by then, even on a loaded machine
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, state, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [w.communicate(timeout=600) for w in workers]
    assert [(w.returncode, out.strip()) for w, (out, _) in zip(workers, results, strict=True)] == [
        (0, "reset")
    ] * 6, [err[-500:] for _, err in results]
    assert leftovers([state]) == []  # the last to close unmounted the store: nothing is left


def test_a_process_that_fails_to_start_leaves_nothing_mounted(monkeypatch):
    """The store mounts, then reading the sandboxes fails (a disk error): start raises, and
    releases the store it mounted."""
    state = tempfile.mkdtemp(prefix="pomona-failing-")
    glob = Path.glob

    def failing(self: Path, pattern: str):  # type: ignore[no-untyped-def]
        if pattern == "*/record.json":
            raise OSError(5, "Input/output error")
        return glob(self, pattern)

    monkeypatch.setattr(Path, "glob", failing)
    with pytest.raises(OSError, match="Input/output"):
        asyncio.run(LocalRuntime(state).start())
    assert leftovers([state]) == []


def test_the_store_is_never_bigger_than_its_disk():
    state = tempfile.mkdtemp(prefix="pomona-store-size-")
    disk = os.statvfs(state)
    runtime = LocalRuntime(state, store_size=2**43)  # 8 TiB asked for, on a smaller disk
    asyncio.run(runtime.start())
    try:
        assert os.stat(os.path.join(state, "store.xfs")).st_size <= disk.f_bavail * disk.f_frsize
    finally:
        asyncio.run(runtime.close())
    assert leftovers([state]) == []
