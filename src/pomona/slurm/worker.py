"""What one array task runs on its node: `python -m pomona.slurm.worker SHARD.json` plays the
shard's attempts of the run (pomona.run with the run's own settings) with sandboxes in a
node-local state directory and its own proxy, into the run's shared trajectory directory, then
leaves SHARD.done so the driver knows the shard was played to its end."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from pomona.benchmarks.resume import RunManifest
from pomona.run import run_benchmark


def play(shard_path: Path) -> int:
    shard = json.loads(shard_path.read_text())
    manifest = RunManifest(**shard["manifest"])
    attempts = [(str(t), int(i)) for t, i in shard["attempts"]]
    job = (
        f"{os.environ.get('SLURM_ARRAY_JOB_ID', '?')}_{os.environ.get('SLURM_ARRAY_TASK_ID', '?')}"
    )
    if not shard.get("state_dir"):
        sweep(Path(tempfile.gettempdir()))
    state = shard.get("state_dir") or tempfile.mkdtemp(prefix=f"pomona-slurm-{job}-")
    alive = _hold(state) if not shard.get("state_dir") else None
    print(f"[pomona worker {job} on {socket.gethostname()}] {len(attempts)} attempt(s)", flush=True)
    try:
        result = run_benchmark(
            manifest.benchmark, manifest.harness, manifest.model, k=manifest.k,
            runtime=manifest.runtime, trajectories=shard["trajectories"],
            concurrency=manifest.concurrency, timeout=manifest.timeout, models=manifest.models,
            task_ids=manifest.tasks, state_dir=state, progress=False, judge=manifest.judge,
            judge_prompts=manifest.judge_prompts, image=manifest.image, run_id=manifest.run_id,
            only=attempts,
        )  # fmt: skip
    finally:
        if not shard.get("state_dir"):
            _release(state)
            # a worker killed while this one started (a failed node's, still dying then) is
            # gone by now: what it left is released here, not left for a later job
            sweep(Path(tempfile.gettempdir()))
            if alive is not None:
                alive.close()
    done = {"host": socket.gethostname(), "job": job, "episodes": len(result.records)}
    shard_path.with_suffix(".done").write_text(json.dumps(done))
    return 0


WORKER_LOCK = "worker.lock"  # held by the worker for its whole life, from just after mkdtemp


def _hold(state: str) -> TextIO:
    """The worker's lock on its state directory: a killed worker's is free (the kernel drops it),
    so a sweep knows the directory is left over even if the runtime never started in it."""
    held = open(Path(state, WORKER_LOCK), "a")  # held until the worker ends
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


def _held(lock: Path) -> bool:
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def sweep(tmp: Path) -> None:
    """Release what workers killed on this node left (a node-local /tmp that outlives jobs):
    state dirs whose worker's lock and runtime's lock no live process holds, whether or not the
    runtime had started there (a worker killed at start leaves an empty one)."""
    from pomona.orchestrator.gc import collect

    for state in tmp.glob("pomona-slurm-*"):
        locks = [lock for lock in (state / WORKER_LOCK, state / "lock") if lock.exists()]
        if not locks:
            continue  # no lock yet, or not a state dir: never someone else's in the making
        if any(_held(lock) for lock in locks):
            continue  # a live worker's
        if (state / "store").exists():
            collect(state)
        shutil.rmtree(state, ignore_errors=True)
        print(f"released {state}, left by a killed worker", flush=True)


def _release(state: str) -> None:
    """The node-local state directory's sandboxes, store and files, once the shard is played."""
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(state)
    if Path(state, "store").exists():
        LocalRuntime(state).unmount_store()
    shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(play(Path(sys.argv[1])))
