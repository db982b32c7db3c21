"""Slurm's own commands, as a run uses them: `sbatch` a job array, `squeue` while it runs,
`scontrol show job` for how each array task ended (kept by the controller for MinJobAge after
the end, so no accounting database is needed), `scancel`."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pomona.errors import PomonaError

FINISHED_OK = "COMPLETED"
# job states in which a task's node or allocation was lost before the work ended
LOST = ("NODE_FAIL", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
        "OUT_OF_MEMORY")  # fmt: skip


class SlurmError(PomonaError, RuntimeError):
    """Slurm refused or could not be asked (no sbatch, the controller down, a bad account)."""


@dataclass
class SlurmSettings:
    """The user's own cluster settings, passed to sbatch as given (unset: the cluster's
    defaults, and whatever SBATCH_* variables the user set)."""

    account: str | None = None
    partition: str | None = None
    time: str | None = None  # per node: minutes, or [D-]HH:MM:SS
    nodes: int = 2  # array tasks: how many nodes the run is spread over (at most)
    cpus_per_task: int | None = None
    mem: str | None = None
    options: list[str] = field(default_factory=list)  # any other sbatch option, verbatim
    retries: int = 1  # how often a lost node's attempts are submitted again
    poll: float = 2.0  # seconds between squeue polls
    state_dir: str | None = None  # the sandboxes' state dir on a node (default: node-local tmp)

    def sbatch_options(self) -> list[str]:
        pairs = {
            "--account": self.account,
            "--partition": self.partition,
            "--time": self.time,
            "--cpus-per-task": self.cpus_per_task,
            "--mem": self.mem,
        }
        return [f"{k}={v}" for k, v in pairs.items() if v is not None] + self.options


def _slurm(argv: list[str], timeout: float = 60) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} is not installed here (pomona doctor slurm)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{argv[0]} got no answer in {timeout:g} s (is the controller up?)"
        ) from None
    if done.returncode != 0:
        raise SlurmError(
            f"{shlex.join(argv[:3])}...: {(done.stderr or done.stdout).strip()[-500:]}"
        )
    return done.stdout


def submit(script: Path, array: int, settings: SlurmSettings, name: str, logs: Path) -> str:
    """Submit `script` as an array of `array` tasks; returns the job id."""
    logs.mkdir(parents=True, exist_ok=True)
    argv = [
        "sbatch", "--parsable", "--no-requeue", f"--array=0-{array - 1}", f"--job-name={name}",
        f"--output={logs}/%A_%a.out", "--export=ALL", *settings.sbatch_options(), str(script),
    ]  # fmt: skip
    return _slurm(argv).strip().split(";")[0]


def running(job: str) -> bool:
    """Whether any task of the job is still pending or running."""
    return bool(_slurm(["squeue", "-h", "-j", job, "-o", "%i"]).strip())


def tasks(job: str) -> dict[int, dict[str, str]]:
    """Array task index -> its JobState, NodeList, Reason and ExitCode, from the controller."""
    out: dict[int, dict[str, str]] = {}
    for line in _slurm(["scontrol", "-o", "show", "job", job]).splitlines():
        fields = dict(p.split("=", 1) for p in line.split() if "=" in p)
        if fields.get("ArrayTaskId", "").isdigit():
            out[int(fields["ArrayTaskId"])] = fields
    return out


def cancel(job: str) -> None:
    subprocess.run(["scancel", job], capture_output=True)


def batch_script(python: str, shards: Path) -> str:
    """What each array task runs: the worker on its shard, with the driver's interpreter (a venv
    on the shared filesystem, as on any cluster)."""
    return (
        "#!/bin/sh\n"
        f"exec {shlex.quote(python)} -m pomona.slurm.worker "
        f'{shlex.quote(str(shards))}/shard-"$SLURM_ARRAY_TASK_ID".json\n'
    )


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o755)
    return path


def add_arguments(p: object) -> None:
    """`pomona run`'s --slurm options."""
    import argparse

    assert isinstance(p, argparse.ArgumentParser)
    g = p.add_argument_group("slurm", "spread the run over a Slurm cluster's nodes (--slurm)")
    g.add_argument("--slurm", action="store_true", help="run the attempts as a Slurm job array")
    g.add_argument("--slurm-account", help="sbatch --account")
    g.add_argument("--slurm-partition", help="sbatch --partition")
    g.add_argument("--slurm-time", help="sbatch --time, per node (e.g. 2:00:00)")
    g.add_argument("--slurm-nodes", type=int, default=2, help="array tasks, one per node (2)")
    g.add_argument("--slurm-cpus", type=int, help="sbatch --cpus-per-task")
    g.add_argument("--slurm-mem", help="sbatch --mem")
    g.add_argument("--slurm-option", action="append", default=[], metavar="OPT",
                   help="any other sbatch option, verbatim (repeatable)")  # fmt: skip
    g.add_argument("--slurm-retries", type=int, default=1,
                   help="times a lost node's attempts are submitted again (1)")  # fmt: skip


def settings_of(args: object) -> SlurmSettings:
    get = args.__dict__.get
    return SlurmSettings(
        account=get("slurm_account"), partition=get("slurm_partition"), time=get("slurm_time"),
        nodes=get("slurm_nodes") or 2, cpus_per_task=get("slurm_cpus"), mem=get("slurm_mem"),
        options=list(get("slurm_option") or []), retries=get("slurm_retries", 1),
    )  # fmt: skip
