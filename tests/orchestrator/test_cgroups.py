"""cgroup limits as files. This machine runs cgroup v1, where the conformance suite shows the
limits hold; v2 (what most users' machines run) cannot be mounted with controllers here, so v2 is
checked against a directory laid out like /sys/fs/cgroup — a stand-in, named as such, for the
file protocol only."""

from __future__ import annotations

from pathlib import Path

from pomona.orchestrator.linux.cgroups import Cgroup, is_v2
from pomona.orchestrator.types import Limits


def test_v2_limits_are_written_as_the_kernel_expects(tmp_path: Path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    assert is_v2(tmp_path)
    group = Cgroup("sb-1", "pomona-test", root=tmp_path)
    group.create(Limits(cpu=1.5, memory="256Mi", pids=64))
    d = tmp_path / "pomona-test" / "sb-1"
    assert (d / "memory.max").read_text() == str(256 * 2**20)
    assert (d / "memory.swap.max").read_text() == "0"
    assert (d / "pids.max").read_text() == "64"
    assert (d / "cpu.max").read_text() == "150000 100000"
    assert group.procs_files == [str(d / "cgroup.procs")]
    assert "+memory" in (tmp_path / "pomona-test" / "cgroup.subtree_control").read_text()


def test_v1_limits_go_to_each_controller(tmp_path: Path):
    for controller in ("memory", "pids", "cpu"):
        (tmp_path / controller).mkdir()
    assert not is_v2(tmp_path)
    group = Cgroup("sb-2", "pomona-test", root=tmp_path)
    group.create(Limits(cpu=0.5, memory=64 * 2**20, pids=16))
    assert (tmp_path / "memory/pomona-test/sb-2/memory.limit_in_bytes").read_text() == str(
        64 * 2**20
    )
    assert (tmp_path / "pids/pomona-test/sb-2/pids.max").read_text() == "16"
    assert (tmp_path / "cpu/pomona-test/sb-2/cpu.cfs_quota_us").read_text() == "50000"
    assert len(group.procs_files) == 3
