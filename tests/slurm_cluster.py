"""A real single-node Slurm cluster for tests: Debian's munged, slurmctld and slurmd (22.05),
started in a private directory with free ports, this machine as the one node (2 CPUs, so two
jobs run at once), and stopped at the end. Nothing outside the directory is touched: the
daemons get their own munge socket, key, spool and state directories, and the clients find the
cluster through SLURM_CONF."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def available() -> str | None:
    """Why no cluster can be started here, or None."""
    missing = [d for d in (*DAEMONS, "mungekey", "sbatch") if not shutil.which(d)]
    if missing:
        return f"needs {', '.join(missing)} (./dev setup installs slurmctld, slurmd, munge)"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CONF = """ClusterName=pomona-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def _wait(what: str, ready: callable, seconds: float = 120) -> None:  # type: ignore[valid-type]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.3)
    raise RuntimeError(f"the test Slurm cluster's {what} did not come up in {seconds:g} s")


@contextmanager
def cluster(root: Path) -> Iterator[dict[str, str]]:
    """The cluster's client environment (SLURM_CONF...) while it runs."""
    host = socket.gethostname().split(".")[0]
    for sub in ("munge", "ctld", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, capture_output=True)
    conf = root / "slurm.conf"
    conf.write_text(
        CONF.format(host=host, root=root, ctld_port=_free_port(), slurmd_port=_free_port())
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    socket_path = root / "munge" / "munge.socket.2"
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(
            subprocess.Popen(
                ["munged", "--foreground", "--force", f"--socket={socket_path}",
                 f"--key-file={key}", f"--pid-file={root}/munge/munged.pid",
                 f"--log-file={root}/munge/munged.log", f"--seed-file={root}/munge/seed"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
        _wait("munged", socket_path.exists)
        for daemon in ("slurmctld", "slurmd"):
            started.append(
                subprocess.Popen(
                    [daemon, "-D", "-f", str(conf)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        def node_idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True
            ).stdout.strip()
            return out in ("idle", "mixed", "allocated")

        _wait("node", node_idle)
        yield {"SLURM_CONF": str(conf), "host": host, "root": str(root)}
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
