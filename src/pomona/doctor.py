"""`pomona doctor`: per runtime, what this machine has and lacks, and the one command that fixes
each missing piece.

    pomona doctor                 every runtime; exit 0 when at least one sandbox runtime is ready
    pomona doctor local slurm     only these; exit 0 when all of them are ready
    pomona doctor --json          the same as data

Every check probes the thing itself (a user namespace is made, an overlay is mounted inside one,
the engine's socket is pinged, the Slurm controller is asked), never only the presence of a file,
so a kernel knob or a policy module that forbids what a binary would do is found too. Nothing is
changed on the machine: the fixes are printed, not run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import http.client
import json
import os
import platform
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

SUBID_COUNT = 65536  # one full 16-bit id space per user, as useradd gives
SUBUID, SUBGID = Path("/etc/subuid"), Path("/etc/subgid")
PROBE_TIMEOUT = 20.0


@dataclass
class Check:
    """One thing a runtime needs. `ok` None: not applicable here (said in `detail`)."""

    name: str
    ok: bool | None
    detail: str
    fix: str | None = None  # one shell command line
    required: bool = True  # False: a feature of the runtime, not the runtime itself


@dataclass
class Report:
    runtime: str
    purpose: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return all(c.ok is not False for c in self.checks if c.required)


# -- probing helpers ------------------------------------------------------------------------------


def _run(argv: list[str], timeout: float = PROBE_TIMEOUT, **kw: object) -> tuple[int, str]:
    """Exit status and combined output of a probe; 127 when the program is missing."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw
        )  # type: ignore[call-overload]
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer in {timeout:g} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def _first_line(text: str) -> str:
    return text.splitlines()[0][:160] if text else ""


def _sudo() -> str:
    return "" if os.geteuid() == 0 else "sudo "


def _installer() -> str:
    """The package install command of this distribution."""
    for tool, command in (
        ("apt-get", "apt-get install -y"),
        ("dnf", "dnf install -y"),
        ("zypper", "zypper install -y"),
        ("pacman", "pacman -S --noconfirm"),
    ):
        if shutil.which(tool):
            return command
    return "apt-get install -y"


# Debian package -> the name on Fedora/RHEL, where it differs
_DNF_NAMES = {
    "uidmap": "shadow-utils",
    "busybox-static": "busybox",
    "docker.io": "moby-engine",
    "slurm-client": "slurm",
    "libc6-dev": "glibc-static",
    "libseccomp2": "libseccomp",
    "runsc": "runsc",
}


def install(*packages: str) -> str:
    command = _installer()
    names = [_DNF_NAMES.get(p, p) for p in packages] if command.startswith("dnf") else packages
    return f"{_sudo()}{command} {' '.join(names)}"


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return getpass.getuser()


# -- the local runtime ----------------------------------------------------------------------------


def _binary(name: str, package: str, what: str, required: bool = True) -> Check:
    path = shutil.which(name)
    if path:
        return Check(what, True, path, required=required)
    return Check(what, False, f"{name} is not installed", install(package), required)


def _userns_fix() -> str:
    """The knob that forbids unprivileged user namespaces on this kernel, as a sysctl command."""
    knobs = {
        "kernel/unprivileged_userns_clone": ("1", "kernel.unprivileged_userns_clone=1"),
        "kernel/apparmor_restrict_unprivileged_userns": (
            "0",
            "kernel.apparmor_restrict_unprivileged_userns=0",
        ),
        "user/max_user_namespaces": (None, "user.max_user_namespaces=15000"),
    }
    for knob, (good, setting) in knobs.items():
        path = Path("/proc/sys") / knob
        with contextlib.suppress(OSError):
            value = path.read_text().strip()
            if (good is not None and value != good) or (good is None and value == "0"):
                return f"{_sudo()}sysctl -w {setting}"
    return f"{_sudo()}sysctl -w user.max_user_namespaces=15000"


def check_user_namespaces() -> Check:
    code, out = _run(["unshare", "--user", "--map-root-user", "true"])
    if code == 0:
        limit = Path("/proc/sys/user/max_user_namespaces")
        most = limit.read_text().strip() if limit.exists() else "?"
        return Check("user namespaces", True, f"unshare --user works (at most {most})")
    if code == 127:
        return Check("user namespaces", False, out, install("util-linux"))
    return Check("user namespaces", False, _first_line(out) or f"exit {code}", _userns_fix())


OVERLAY_PROBE = (
    "mkdir -p l u w m && echo x > l/f && "
    "mount -t overlay overlay -o lowerdir=l,upperdir=u,workdir=w m && cat m/f"
)


def check_overlay() -> Check:
    """An overlay mounted by root inside a new user namespace: what a sandbox's root filesystem
    is made of as an ordinary user (kernel >= 5.11); as root it also shows the module is there."""
    with tempfile.TemporaryDirectory(prefix="pomona-doctor-") as d:
        code, out = _run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", OVERLAY_PROBE], cwd=d
        )
    if code == 0 and out.endswith("x"):
        return Check("overlayfs in a user namespace", True, "mounted and read back")
    release = platform.release()
    detail = _first_line(out) or f"exit {code}"
    major_minor = tuple(int(p) for p in release.split(".")[:2] if p.isdigit())
    if major_minor and major_minor < (5, 11):
        return Check(
            "overlayfs in a user namespace",
            False,
            f"kernel {release} mounts no overlay in a user namespace (5.11 adds it): {detail}",
            install("fuse-overlayfs"),
        )
    return Check("overlayfs in a user namespace", False, detail, f"{_sudo()}modprobe overlay")


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 directory."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    return None


DELEGATE = (
    "sudo mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu "
    "cpuset io memory pids\\n' | sudo tee /etc/systemd/system/user@.service.d/delegate.conf "
    "&& sudo systemctl daemon-reload"
)


def check_cgroups() -> Check:
    """Whether sandboxes' cpu, memory and pids limits can be set: as root, the hierarchies are
    writable; as an ordinary user, only a cgroup v2 subtree delegated to the user (systemd's
    Delegate=) can hold them."""
    root = Path("/sys/fs/cgroup")
    name = "cgroup limits (cpu, memory, pids)"
    if (root / "cgroup.controllers").exists():
        if os.geteuid() == 0:
            ok = os.access(root, os.W_OK)
            return Check(
                name, ok, "cgroup v2, writable by root" if ok else "cgroup v2 is read-only here"
            )
        mine = _own_cgroup()
        # the user's delegated subtree is the service that holds this session (user@UID.service)
        delegated = next(
            (p for p in ([mine, *mine.parents] if mine else []) if p.name.startswith("user@")),
            None,
        )
        if delegated is not None and os.access(delegated, os.W_OK):
            controllers = (delegated / "cgroup.controllers").read_text().split()
            missing = sorted({"cpu", "memory", "pids"} - set(controllers))
            if not missing:
                return Check(name, True, f"cgroup v2 delegated at {delegated}")
            return Check(
                name,
                False,
                f"{delegated} lacks the {', '.join(missing)} controller(s)",
                DELEGATE,
                required=False,
            )
        return Check(
            name,
            False,
            "no cgroup v2 subtree is delegated to this user: limits would not be enforced",
            DELEGATE,
            required=False,
        )
    controllers = [c for c in ("cpu", "memory", "pids") if (root / c).is_dir()]
    if os.geteuid() == 0:
        missing = sorted({"cpu", "memory", "pids"} - set(controllers))
        return Check(
            name,
            not missing,
            f"cgroup v1 ({', '.join(controllers)})"
            + (f"; no {', '.join(missing)}" if missing else ""),
        )
    return Check(
        name,
        False,
        "cgroup v1 delegates nothing to ordinary users: limits would not be enforced",
        _unified_cgroup_fix(),
        required=False,
    )


def _unified_cgroup_fix() -> str:
    """Booting with the unified (v2) hierarchy, which systemd can delegate to users."""
    arg = "systemd.unified_cgroup_hierarchy=1"
    if shutil.which("grubby"):
        return f"sudo grubby --update-kernel=ALL --args={arg}  # then reboot"
    return (
        f"sudo sed -i 's/^GRUB_CMDLINE_LINUX=\"/&{arg} /' /etc/default/grub && sudo update-grub"
        "  # then reboot"
    )


def _subid_ranges(path: Path, user: str, uid: int) -> list[tuple[int, int]]:
    ranges = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            parts = line.strip().split(":")
            if (
                len(parts) == 3
                and parts[0] in (user, str(uid))
                and parts[1].isdigit()
                and parts[2].isdigit()
            ):
                ranges.append((int(parts[1]), int(parts[2])))
    return ranges


def _free_subid_start(paths: Iterable[Path]) -> int:
    """The first id above every range already given out (useradd's own first is 100000)."""
    end = 100000
    for path in paths:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                parts = line.strip().split(":")
                if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                    end = max(end, int(parts[1]) + int(parts[2]))
    return end


def check_subids() -> list[Check]:
    """An ordinary user's sandboxes map root and uid 1000 inside to ids of the user's own
    subordinate range (newuidmap/newgidmap, setuid, write the map): no range, no sandbox users."""
    if os.geteuid() == 0:
        return [Check("subordinate id ranges", None, "not needed as root (root maps any ids)")]
    user, uid = _user(), os.geteuid()
    files = {"uid": SUBUID, "gid": SUBGID}
    short = [
        kind
        for kind, path in files.items()
        if sum(n for _, n in _subid_ranges(path, user, uid)) < SUBID_COUNT
    ]
    checks = [_binary("newuidmap", "uidmap", "newuidmap / newgidmap")]
    if not short:
        found = _subid_ranges(files["uid"], user, uid)[0]
        checks.append(
            Check(
                "subordinate id ranges",
                True,
                f"{user}: {found[0]}-{found[0] + found[1] - 1} in /etc/subuid and /etc/subgid",
            )
        )
        return checks
    start = _free_subid_start(files.values())
    last = start + SUBID_COUNT - 1
    checks.append(
        Check(
            "subordinate id ranges",
            False,
            f"{user} has fewer than {SUBID_COUNT} subordinate {' and '.join(short)}s",
            f"sudo usermod --add-subuids {start}-{last} --add-subgids {start}-{last} {user}",
        )
    )
    return checks


def check_local_runtime() -> Check:
    """What Pomona's own local runtime says of this machine (its own requirements, whatever
    they are in this version), from constructing one on a scratch directory."""
    from pomona.errors import PomonaError
    from pomona.orchestrator.runtimes.local.runtime import check_machine

    rootless = os.geteuid() != 0  # SandboxClient("local") runs it rootless then
    try:
        check_machine(rootless)
    except PomonaError as e:
        return Check("pomona's local runtime", False, str(e), _fix_from(str(e)))
    mode = "as an ordinary user (rootless: docs/security.md)" if rootless else "as root"
    return Check("pomona's local runtime", True, f"accepts this machine, {mode}")


def _fix_from(message: str) -> str | None:
    """The command a runtime's own refusal names, when it names one."""
    for marker in ("apt-get install ", "run ./dev setup"):
        if marker in message:
            tail = message.split(marker, 1)[1].split(" (")[0].split(";")[0].strip()
            return install(*tail.split()) if marker.startswith("apt") else None
    return None


def local_report() -> Report:
    report = Report("local", "namespaced sandboxes on this machine: the default runtime")
    report.checks += [
        check_local_runtime(),
        _binary("cc", "gcc libc6-dev", "a C compiler (builds pomona-init and pomona-enter)"),
        check_user_namespaces(),
        check_overlay(),
        *check_subids(),
        check_cgroups(),
        _binary(
            "unsquashfs", "squashfs-tools", "squashfs-tools (Apptainer/SIF images)", required=False
        ),
    ]
    return report


# -- container engines ----------------------------------------------------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=5)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.path)


def ping(url: str) -> tuple[bool, str]:
    """GET /_ping on an engine's API socket (unix:// only; a tcp:// engine is reported as is)."""
    if not url.startswith("unix://"):
        return True, f"{url} (not probed: only unix sockets are)"
    path = url.removeprefix("unix://")
    connection = _UnixConnection(path)
    try:
        connection.request("GET", "/_ping")
        answer = connection.getresponse()
        body = answer.read().decode(errors="replace")
    except FileNotFoundError:
        return False, f"no socket at {path}"
    except PermissionError:
        return False, f"{path} is not accessible to {_user()}"
    except OSError as e:
        return False, f"{path}: {e.strerror or e}"
    finally:
        connection.close()
    return answer.status == 200, f"{path} answers {answer.status} {body[:20]}"


def docker_report() -> Report:
    report = Report("docker", "containers through a Docker engine's API")
    url = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    report.checks.append(_python_package("docker", "docker"))
    ok, detail = ping(url)
    fix = None
    if not ok:
        if "not accessible" in detail:
            fix = f"sudo usermod -aG docker {_user()}  # then log in again"
        elif not (shutil.which("dockerd") or shutil.which("docker")):
            fix = install("docker.io")
        else:
            fix = (
                f"{_sudo()}systemctl start docker"
                if shutil.which("systemctl")
                else f"{_sudo()}dockerd &"
            )
    report.checks.append(Check("engine reachable", ok, detail, fix))
    return report


def _podman_socket() -> str:
    if os.geteuid() == 0:
        return "/run/podman/podman.sock"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    return f"{runtime_dir}/podman/podman.sock"


def podman_report() -> Report:
    report = Report("podman", "containers through Podman's Docker-compatible API")
    report.checks.append(_python_package("docker", "docker"))
    present = _binary("podman", "podman", "podman")
    report.checks.append(present)
    if present.ok:
        path = _podman_socket()
        ok, detail = ping(f"unix://{path}")
        fix = None if ok else f"podman system service --time=0 unix://{path} &"
        report.checks.append(Check("API socket", ok, detail, fix))
        report.checks.append(
            _binary("runc", "runc", "runc (crun fails on cgroup v1)", required=False)
        )
    return report


def gvisor_report() -> Report:
    """gVisor's runsc, for a container runtime (Docker's --runtime=runsc, a RuntimeClass)."""
    report = Report("gvisor", "runsc: a user-space kernel under the container runtimes")
    code, out = _run(["runsc", "--version"])
    if code == 127:
        report.checks.append(Check("runsc", False, "runsc is not installed", install("runsc")))
        return report
    report.checks.append(Check("runsc", code == 0, _first_line(out)))
    argv = ["runsc", "--network=none", "--platform=ptrace"]
    if os.geteuid() != 0:
        argv.append("--rootless")
    with tempfile.TemporaryDirectory(prefix="pomona-doctor-") as d:
        code, out = _run([*argv, f"--root={d}", "do", "/bin/true"], timeout=60)
    report.checks.append(
        Check(
            "runsc runs a command (ptrace platform)",
            code == 0,
            "ok" if code == 0 else _first_line(out) or f"exit {code}",
        )
    )
    return report


def _python_package(module: str, extra: str) -> Check:
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return Check(f"python package {module}", True, "installed")
    return Check(
        f"python package {module}",
        False,
        "not installed",
        f"{sys.executable} -m pip install 'pomona[{extra}]'",
    )


# -- Slurm ----------------------------------------------------------------------------------------


def slurm_report() -> Report:
    """`pomona run --slurm` submits with sbatch and watches with squeue/sacct."""
    report = Report("slurm", "episodes spread over a Slurm cluster's nodes (pomona run --slurm)")
    tools = [_binary(b, "slurm-client", b) for b in ("sbatch", "squeue", "scontrol")]
    report.checks += tools
    if not all(t.ok for t in tools):
        return report
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    if not Path(conf).is_file():
        report.checks.append(
            Check(
                "slurm.conf",
                False,
                f"no {conf}: this machine is not set up as a cluster's client",
                "export SLURM_CONF=/path/to/the/cluster/slurm.conf",
            )
        )
        return report
    if shutil.which("munge"):
        found = re.search(r"^\s*AuthInfo=\S*socket=([^,\s]+)", Path(conf).read_text(), re.M)
        code, out = _run(["munge", "-n", *(["-S", found.group(1)] if found else [])], timeout=10)
        fix = f"{_sudo()}systemctl start munge" if shutil.which("systemctl") else f"{_sudo()}munged"
        report.checks.append(
            Check(
                "munge credentials",
                code == 0,
                "a credential was made" if code == 0 else _first_line(out),
                None if code == 0 else fix,
            )
        )
    code, out = _run(["scontrol", "ping"], timeout=15)
    up = code == 0 and " is UP" in out
    report.checks.append(
        Check(
            "controller answers",
            up,
            _first_line(out) or f"exit {code}",
            None if up else f"scontrol ping  # {conf} names a controller that does not answer",
        )
    )
    if up:
        code, out = _run(["sinfo", "-h", "-o", "%P %a %D %T"], timeout=15)
        parts = ", ".join(line.strip() for line in out.splitlines()[:6]) or "none"
        report.checks.append(
            Check("partitions (name, state, nodes, node state)", code == 0 and bool(out), parts)
        )
        report.checks.append(_slurm_account())
    return report


def _slurm_account() -> Check:
    code, out = _run(
        ["sacctmgr", "-nP", "show", "assoc", f"user={_user()}", "format=account,partition"],
        timeout=15,
    )
    if code != 0:
        return Check(
            "accounts",
            None,
            "no accounting database: --slurm-account is not needed",
            required=False,
        )
    accounts = sorted({line.split("|")[0] for line in out.splitlines() if line})
    return Check(
        "accounts", bool(accounts), ", ".join(accounts) or "none for this user", required=False
    )


# -- Kubernetes -----------------------------------------------------------------------------------


def kubernetes_report() -> Report:
    report = Report(
        "kubernetes", "one pod per sandbox on a cluster (pomona serve --runtime kubernetes)"
    )
    report.checks.append(_python_package("kubernetes", "kubernetes"))
    config = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    found = in_cluster or any(Path(p).is_file() for p in config.split(os.pathsep))
    report.checks.append(
        Check(
            "cluster credentials",
            found,
            "in-cluster service account" if in_cluster else (config if found else f"no {config}"),
            None if found else "export KUBECONFIG=/path/to/kubeconfig",
        )
    )
    return report


REPORTS: dict[str, Callable[[], Report]] = {
    "local": local_report,
    "docker": docker_report,
    "podman": podman_report,
    "gvisor": gvisor_report,
    "slurm": slurm_report,
    "kubernetes": kubernetes_report,
}
SANDBOX_RUNTIMES = ("local", "docker", "podman", "kubernetes")


def machine() -> str:
    os_name = "Linux"
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    cgroup = "v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "v1"
    who = "root" if os.geteuid() == 0 else f"{_user()} (uid {os.geteuid()}, not root)"
    return (
        f"{who} on {os_name}, kernel {platform.release()}, cgroup {cgroup}, {os.cpu_count()} cores"
    )


def diagnose(names: Iterable[str] | None = None) -> list[Report]:
    return [REPORTS[n]() for n in (names or REPORTS)]


MARK = {True: "ok  ", False: "MISS", None: " -- "}


def format_reports(reports: list[Report]) -> str:
    lines = [f"pomona doctor: {machine()}"]
    for report in reports:
        state = "ready" if report.ready else "not ready"
        lines += ["", f"{report.runtime}: {state}  ({report.purpose})"]
        for c in report.checks:
            optional = "" if c.required or c.ok else "  (optional)"
            lines.append(f"  {MARK[c.ok]} {c.name}: {c.detail}{optional}")
            if c.ok is False and c.fix:
                lines.append(f"       fix: {c.fix}")
    return "\n".join(lines)


def add_doctor_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor", help="what this machine has and lacks, per runtime, and the fixes"
    )
    p.add_argument("runtimes", nargs="*", metavar="RUNTIME", help=", ".join(REPORTS))
    p.add_argument("--json", action="store_true", help="the checks as JSON")
    p.set_defaults(func=_doctor)
    return p


def _doctor(args: argparse.Namespace) -> int:
    unknown = [n for n in args.runtimes if n not in REPORTS]
    if unknown:
        print(
            f"pomona doctor: no runtime {', '.join(unknown)}; choose from {', '.join(REPORTS)}",
            file=sys.stderr,
        )
        return 2
    reports = diagnose(args.runtimes or None)
    if args.json:
        print(json.dumps([{**dataclasses.asdict(r), "ready": r.ready} for r in reports], indent=2))
    else:
        print(format_reports(reports))
    if args.runtimes:
        return 0 if all(r.ready for r in reports) else 1
    return 0 if any(r.ready for r in reports if r.runtime in SANDBOX_RUNTIMES) else 1
