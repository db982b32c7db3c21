"""A run waiting on another process's payload install says so, and what it waits for, instead of
sitting silent for minutes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HOLD = (
    "import fcntl, sys\nf = open(sys.argv[1], 'w')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\nsys.stdin.read()\n"
)
WAIT = (
    "import sys\nfrom pathlib import Path\nfrom pomona.harnesses import payload\n"
    "with payload._locked(Path(sys.argv[1])):\n    print('got it', flush=True)\n"
)


def test_waiting_for_the_payload_lock_says_so(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    root.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root / ".lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    waiter = None
    try:
        assert holder.stdout.readline() == "held\n"
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAIT, str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = waiter.stderr.readline()  # printed before it blocks
        assert "waiting for another process installing the harness payload" in line
        assert str(root / ".lock") in line
        assert waiter.poll() is None  # still waiting: the holder has not let go
        holder.stdin.close()  # the holder exits, the lock is free
        assert waiter.stdout.readline() == "got it\n"
        assert waiter.wait(60) == 0
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
