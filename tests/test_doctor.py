"""`pomona doctor`: what it finds on this machine, as root and as an ordinary user, and that the
one command it offers fixes what it found missing (run where that changes nothing outside the
test: a user namespace's own limit, a copy of the id files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pomona import doctor
from pomona.cli import main
from tests.conftest import docker_available

NOBODY = 65534


def as_user(uid: int, call: Any) -> Any:
    """`call()` in a forked child running as `uid` (no groups), its result sent back as JSON:
    the doctor's view of an ordinary user, with this process's modules already loaded."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.chdir("/")
            os.environ["TMPDIR"] = "/tmp"
            out = json.dumps(call(), default=lambda o: o.__dict__).encode()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = json.dumps({"error": repr(e)}).encode()
        os.write(write, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_every_runtime_is_reported_with_fixes(capsys):
    code = main(["doctor"])
    out = capsys.readouterr().out
    for runtime in doctor.REPORTS:
        assert f"\n{runtime}: " in out
    assert code == (0 if doctor.local_report().ready else 1)
    for line in out.splitlines():  # every missing piece comes with its fix on the next line
        if "MISS" in line:
            following = out.splitlines()[out.splitlines().index(line) + 1]
            assert following.strip().startswith("fix: ")
    assert main(["doctor", "--json", "local"]) in (0, 1)
    (local,) = json.loads(capsys.readouterr().out)
    assert local["runtime"] == "local" and {c["name"] for c in local["checks"]} >= {
        "user namespaces",
        "overlayfs in a user namespace",
        "subordinate id ranges",
    }
    assert main(["doctor", "nonsense"]) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="runs probes as root in a user namespace")
def test_denied_user_namespaces_are_found_and_the_fix_works():
    """In a user namespace whose own limit is 0 (so the machine is untouched), the check fails
    and names the sysctl; running that command there makes the check pass."""
    probe = (  # doctor.py alone (stdlib only): no package import per probe
        "import json, sys, dataclasses, importlib.util as u; "
        f"s = u.spec_from_file_location('doctor', {doctor.__file__!r}); "
        "d = sys.modules['doctor'] = u.module_from_spec(s); s.loader.exec_module(d); "
        "print(json.dumps(dataclasses.asdict(d.check_user_namespaces())))"
    )
    inner = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc"]
    deny = "echo 0 > /proc/sys/user/max_user_namespaces"

    def check(then: str = "true") -> dict[str, Any]:
        script = f'{deny} && {then} >/dev/null && exec "$0" -c "$1"'
        done = subprocess.run(
            [*inner, "sh", "-c", script, sys.executable, probe], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    denied = check()
    assert denied["ok"] is False and "No space left" in denied["detail"]
    assert denied["fix"] == "sysctl -w user.max_user_namespaces=15000"
    assert check(then=denied["fix"])["ok"] is True


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to an ordinary user")
def test_an_ordinary_users_view_and_the_subid_fix(monkeypatch):
    """As uid 65534: user namespaces and overlayfs are probed as that user, a missing subordinate
    id range is found, and the usermod command offered gives one that the check then accepts."""
    tmp_path = Path(tempfile.mkdtemp(dir="/tmp", prefix="pomona-doctor-test-"))  # nobody reads it
    try:
        _subid_fix(tmp_path, monkeypatch)
    finally:
        shutil.rmtree(tmp_path)


def _subid_fix(tmp_path: Path, monkeypatch: Any) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("passwd", "group", "shadow", "gshadow", "subuid", "subgid"):
        source = Path("/etc") / name
        (etc / name).write_text(source.read_text() if source.exists() else "")
    (etc / "subuid").write_text((etc / "subuid").read_text() + "someone:100000:65536\n")
    (etc / "subgid").write_text((etc / "subgid").read_text() + "someone:100000:65536\n")
    for path in (tmp_path, etc, etc / "subuid", etc / "subgid"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    monkeypatch.setattr(doctor, "SUBUID", etc / "subuid")
    monkeypatch.setattr(doctor, "SUBGID", etc / "subgid")

    view = as_user(
        NOBODY,
        lambda: [*doctor.check_subids(), doctor.check_user_namespaces(), doctor.check_cgroups()],
    )
    assert "error" not in view, view
    subids = next(c for c in view if c["name"] == "subordinate id ranges")
    assert subids["ok"] is False and "nobody" in subids["detail"]
    fix = subids["fix"]
    taken = [line.split(":") for line in (etc / "subuid").read_text().splitlines() if line]
    start = max(int(first) + int(count) for _, first, count in taken)
    ids = f"{start}-{start + 65535}"
    assert fix == f"sudo usermod --add-subuids {ids} --add-subgids {ids} nobody"
    userns = next(c for c in view if c["name"] == "user namespaces")
    assert userns["ok"] is True  # unprivileged user namespaces are allowed here
    cgroups = next(c for c in view if c["name"].startswith("cgroup limits"))
    assert cgroups["required"] is False  # limits are a feature: unenforced is said, not fatal

    command = fix.removeprefix("sudo ").replace("usermod ", f"usermod --prefix {tmp_path} ", 1)
    subprocess.run(command.split(), check=True, capture_output=True)
    view = as_user(NOBODY, doctor.check_subids)
    assert next(c for c in view if c["name"] == "subordinate id ranges")["ok"] is True


def test_an_unreachable_docker_engine_gets_a_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    report = doctor.docker_report()
    engine = next(c for c in report.checks if c.name == "engine reachable")
    assert not report.ready and engine.ok is False and "no socket" in engine.detail and engine.fix
    if docker_available():
        monkeypatch.delenv("DOCKER_HOST")
        assert doctor.docker_report().ready


def test_slurm_without_a_cluster_says_what_to_set(monkeypatch, tmp_path):
    if not shutil.which("sbatch"):
        pytest.skip("needs slurm-client (./dev setup)")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    report = doctor.slurm_report()
    conf = next(c for c in report.checks if c.name == "slurm.conf")
    assert not report.ready and conf.fix and "SLURM_CONF" in conf.fix
