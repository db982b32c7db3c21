"""`pip install` and go: the built wheel, installed into a fresh venv outside the repository, runs
the main job (`pomona run --benchmark swe-local`, one task to keep the suite's time) from a
directory that is not the checkout, and `pomona doctor`, with everything it needs inside the
wheel (task sets, the seccomp loader's source, the viewer's files).

The venv's dependencies come from the suite's own venv through a path entry (resolving them from
PyPI takes minutes; docs/hpc.md gives that measurement): the wheel itself is what is tested, and
its pomona is the one imported (asserted). Wheel and venv are cached outside the checkout by the
hash of the sources they are built from and of the dependency directories the venv points at, so
an unchanged tree is not built again, and a venv whose suite venv is gone (a removed clone) is
never reused."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pomona.harnesses import payload

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("POMONA_CACHE", "/var/cache/pomona")) / "wheel-test"


def _dependency_dirs() -> list[str]:
    """Where this interpreter finds its libraries (site dirs, and those .pth files added), never
    a source checkout: the wheel's pomona must be the only one."""
    return sorted({p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()})


def _build_key() -> str:
    digest = hashlib.sha256("\n".join(_dependency_dirs()).encode() + b"\0")
    files = [ROOT / "pyproject.toml", ROOT / "README.md"]
    for top, dirs, names in os.walk(ROOT / "src"):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [Path(top) / n for n in sorted(names) if not n.endswith(".pyc")]
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _installed() -> Path:
    """The fresh venv with the wheel of this tree in it (built once per tree)."""
    home = CACHE / _build_key()
    venv = home / "venv"
    if (home / "ready").exists():
        return venv
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(home), str(ROOT)],
        check=True, capture_output=True, cwd=home,
    )  # fmt: skip
    (wheel,) = home.glob("pomona-*.whl")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # without PYTHONPATH: a checkout's src on it (a worktree's tests) holds the egg-info the
    # wheel build leaves, and pip would take pomona as installed already and install nothing
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, env=clean,
    )  # fmt: skip
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([python, "-c", code], text=True, env=clean).strip())
    deps = _dependency_dirs()
    (site / "zz-suite-dependencies.pth").write_text("".join(f"{d}\n" for d in deps))
    (home / "ready").write_text(wheel.name)
    return venv


@pytest.fixture(scope="module")
def venv() -> Path:
    if os.geteuid() != 0:
        pytest.skip("the main job's local runtime runs as root here")
    if missing := payload.ensure(["pi"]):
        pytest.skip(f"harness payload unavailable: {missing}")
    return _installed()


def test_the_wheel_runs_the_main_job_outside_the_repository(venv: Path, tmp_path: Path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import pomona; print(pomona.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(venv)), where  # the wheel's pomona, not the checkout's
    state = tmp_path / "state"
    done = subprocess.run(
        [venv / "bin" / "pomona", "run", "--benchmark", "swe-local", "--tasks", "kjd__idna-1",
         "--state-dir", str(state)],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "swebench run report: 1/1 resolved" in done.stdout
        assert list((work / "pomona-runs").glob("episodes-*.arrows"))  # the default store, here
        doctor = subprocess.run(
            [venv / "bin" / "pomona", "doctor", "local"], cwd=work, env=env, capture_output=True,
            text=True,
        )  # fmt: skip
        assert doctor.returncode == 0 and "local: ready" in doctor.stdout, doctor.stdout
    finally:
        subprocess.run(
            [venv / "bin" / "pomona", "gc", "--state-dir", str(state)], env=env, capture_output=True
        )
        from pomona.orchestrator.runtimes.local import LocalRuntime

        if (state / "store").exists():
            LocalRuntime(state).unmount_store()
