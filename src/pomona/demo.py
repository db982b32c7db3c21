"""`pomona demo`: what exists so far, end to end and offline, on the embedded runtime.

Creates a sandbox on the host image, runs commands (one of them times out without harming the
sandbox), writes and reads files, snapshots, forks two diverging branches, and cleans up.
"""

from __future__ import annotations

import tempfile
import time

from pomona.orchestrator.sdk.client import SandboxClient


def run(state_dir: str | None = None) -> int:
    state_dir = state_dir or tempfile.mkdtemp(prefix="pomona-demo-")
    t0 = time.perf_counter()
    with SandboxClient("local", state_dir=state_dir) as client:
        t = time.perf_counter()
        with client.create_sandbox(
            "host", network="none", timeout=600, memory="512Mi", pids=256
        ) as sb:
            print(f"created {sb.id} in {(time.perf_counter() - t) * 1000:.1f} ms")
            r = sb.exec("echo hello from $(hostname) as $(id -un 2>/dev/null || id -u) in $PWD")
            print(f"exec -> exit {r.exit_code}: {r.stdout.strip()} ({r.duration * 1000:.1f} ms)")
            r = sb.exec("sleep 60", timeout=1)
            print(
                f"exec with a 1 s timeout -> timed_out={r.timed_out}, exit {r.exit_code}; "
                f"next exec: {sb.exec('echo still alive').stdout.strip()}"
            )
            sb.write_file("/workspace/counter.txt", "0")
            snap = sb.snapshot()
            print(f"snapshot {snap.id} taken")
            t = time.perf_counter()
            left, right = client.fork(snap, 2)
            print(f"forked 2 sandboxes in {(time.perf_counter() - t) * 1000:.1f} ms")
            left.exec("echo left > /workspace/counter.txt")
            right.exec("echo right > /workspace/counter.txt")
            print(
                "branches diverge:",
                left.read_file("counter.txt").decode().strip(),
                "/",
                right.read_file("counter.txt").decode().strip(),
                "/ original:",
                sb.read_file("counter.txt").decode(),
            )
            left.delete()
            right.delete()
            client.delete_snapshot(snap)
        print(f"all cleaned up; demo took {time.perf_counter() - t0:.2f} s")
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(state_dir).unmount_store()
    return 0
