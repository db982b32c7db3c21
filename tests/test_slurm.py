"""`pomona run --slurm` on a real single-node Slurm (munged, slurmctld, slurmd started here): the
run's attempts spread over array tasks, each with its own sandboxes and proxy, merged into one
run; the node is taken down mid-run (Slurm kills its jobs, NODE_FAIL), the lost attempts become
typed infra failures and are submitted again, and no attempt with a model result is played
twice."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pomona import doctor
from pomona.benchmarks import metrics
from pomona.benchmarks.resume import RunManifest, stored
from pomona.cli import main
from pomona.harnesses import payload
from tests import slurm_cluster

pytestmark = pytest.mark.skipif(
    bool(slurm_cluster.available()), reason=str(slurm_cluster.available())
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Any:
    if missing := payload.ensure(["pi"]):
        pytest.skip(f"harness payload unavailable: {missing}")
    with slurm_cluster.cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def _scontrol(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True).stdout


def test_a_run_over_slurm_survives_a_node_failure(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", cluster["SLURM_CONF"])
    assert doctor.slurm_report().ready
    env = {"SLURM_CONF": cluster["SLURM_CONF"], "PATH": "/usr/bin:/bin"}
    runs = tmp_path / "runs"
    argv = ["run", "--benchmark", "text", "--slurm", "--slurm-nodes", "2", "--concurrency", "1",
            "--slurm-time", "30", "--trajectories", str(runs)]  # fmt: skip
    outcome: dict[str, int] = {}
    driver = threading.Thread(target=lambda: outcome.setdefault("code", main(argv)))
    driver.start()
    try:
        for _ in range(3000):  # the first model result, then the node goes down
            if runs.is_dir() and any(r["failure_kind"] == "none" for r in stored(runs)):
                break
            time.sleep(0.1)
        _scontrol(env, "update", f"nodename={cluster['host']}", "state=down", "reason=pomona-test")
        for _ in range(600):
            if "NODE_FAIL" in _scontrol(env, "-o", "show", "job"):
                break
            time.sleep(0.1)
    finally:
        _scontrol(env, "update", f"nodename={cluster['host']}", "state=resume")
        driver.join(timeout=600)
    assert outcome.get("code") == 0

    (manifest,) = (runs / "runs").glob("*.json")
    plan = RunManifest.load(runs, manifest.stem).planned
    rows = stored(runs)
    lost = [r for r in rows if r["failure_kind"] != "none"]
    assert lost, "the node's failure left no typed failure"
    for row in lost:
        meta = json.loads(row["metadata"])
        assert row["failure_kind"] == "sandbox" and meta["slurm_state"] == "NODE_FAIL"
        assert f"on {cluster['host']} ended NODE_FAIL" in row["failure_message"]
    results = [
        (r["task"], json.loads(r["metadata"])["attempt"])
        for r in rows
        if r["failure_kind"] == "none"
    ]
    assert sorted(results) == sorted(plan)  # every attempt has one model result, none twice
    assert {(r["task"], json.loads(r["metadata"])["attempt"]) for r in lost} <= set(plan)
    (summary,) = metrics.summarize(rows)
    assert (summary.trials, summary.resolve_rate, summary.infra_failures) == (3, 1.0, 0)
    # each array task recorded with its own proxy: several writers' files, one run
    assert len(list(runs.glob("episodes-*.arrows"))) >= 2
    assert {r["run"] for r in rows} == {manifest.stem}
    logs = sorted((runs / "slurm" / manifest.stem / "logs").glob("*.out"))
    assert len(logs) >= 3  # two array tasks, then the round that played the lost attempts
    assert not list(Path(tempfile.gettempdir()).glob("pomona-slurm-*"))  # workers cleaned up


def test_a_sweep_releases_a_worker_killed_before_its_runtime_started(tmp_path):
    """A node failure can kill a worker between making its state directory and starting the
    runtime there: the directory has no store, only the worker's lock, which nobody holds."""
    import fcntl
    import sys

    from pomona.slurm.worker import WORKER_LOCK, sweep

    killed = tmp_path / "pomona-slurm-1_0-killed"
    killed.mkdir()
    (killed / WORKER_LOCK).touch()
    making = tmp_path / "pomona-slurm-1_1-making"  # made a moment ago, not yet locked
    making.mkdir()
    live = tmp_path / "pomona-slurm-1_2-live"
    live.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a');"
         " fcntl.flock(f, fcntl.LOCK_EX); print(flush=True); time.sleep(60)",
         str(live / WORKER_LOCK)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        holder.stdout.readline()  # it holds the lock now
        sweep(tmp_path)
        assert not killed.exists()
        assert making.exists() and live.exists()
    finally:
        holder.kill()
        holder.wait()
    sweep(tmp_path)  # its worker is dead now
    assert not live.exists() and making.exists()
    with open(making / WORKER_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a worker of this process's: kept while held
        sweep(tmp_path)
        assert making.exists()
