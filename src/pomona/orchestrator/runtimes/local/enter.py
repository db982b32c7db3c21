"""Commands into a local sandbox: through its init's namespace files, its cgroup, pomona-enter.

pomona-enter (linux/enter.c) is static: cheap to exec, on any host. It first waits on a pipe
(the gate) while the orchestrator moves it into the sandbox's cgroup, so the command cannot fork
outside the limits; with no preexec_fn, Python can use vfork (a fork of the orchestrator costs
tens of milliseconds). A terminal session needs a preexec_fn anyway (its controlling terminal),
which joins the cgroup itself.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

from pomona.errors import SandboxFailed
from pomona.orchestrator.linux import seccomp
from pomona.orchestrator.linux.cgroups import preexec_joiner
from pomona.orchestrator.linux.helpers import helper
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.runtimes.local.records import Live
from pomona.orchestrator.types import SANDBOX_HOME, SANDBOX_UID, ExecRequest, NetworkMode

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAMESPACES = ("user", "mnt", "uts", "ipc", "net", "pid")  # in the order pomona-enter takes them


@contextlib.contextmanager
def namespaces(live: Live, names: tuple[str, ...]) -> Iterator[dict[str, int]]:
    """The init's namespace files (and root), opened and checked against its pidfd."""
    fds: dict[str, int] = {}
    try:
        for name in names:
            fds[name] = live.open_checked(name if name == "root" else f"ns/{name}")
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


def rlimits(live: Live) -> str:
    """The limits pomona-enter sets where no cgroup holds the command: the process count per
    user of the sandbox (its user namespace is its own, so that is the sandbox's count) and
    each process's address space. CPU is not limited there."""
    limits = live.record.sandbox_spec.limits
    words = [f"nproc={limits.pids}"] if limits.pids else []
    words += [f"as={limits.memory}"] if limits.memory else []
    return ",".join(words) or "-"


def spawn(
    live: Live,
    request: ExecRequest,
    extra_env: dict[str, str] | None = None,
    terminal: int | None = None,
) -> subprocess.Popen:
    """Start a command inside the sandbox: its namespaces, its root, its user namespace and
    ids, its cgroup, the seccomp filter, its own process group."""
    spec = live.record.sandbox_spec
    user = request.user or spec.user
    cwd = normalize(request.cwd or spec.workdir)
    # in `full` mode the sandbox shares the host's network namespace: nothing to enter there
    names = tuple(ns for ns in NAMESPACES if ns != "net" or spec.network != NetworkMode.full)
    if isinstance(request.command, str):
        login = ["-l"] if request.login_shell else []
        command = [live.record.shell, *login, "-c", request.command]
    else:
        command = request.command
    env = {
        "PATH": DEFAULT_PATH,
        **live.record.image_env,
        "HOME": "/root" if user == "root" else SANDBOX_HOME,
        "USER": user,
        "LOGNAME": user,
        "PWD": cwd,
        "LANG": "C.UTF-8",
        **spec.env,
        **(extra_env or {}),
        **request.env,
    }
    uid = str(0 if user == "root" else SANDBOX_UID)
    with namespaces(live, (*names, "root")) as fds:
        argv = [
            helper("pomona-enter"),
            "-",  # the gate, set by _start
            "-" if live.cgroup.usable else rlimits(live),
            str(seccomp.shared_fd()),
            *(str(fds.get(ns, "-")) for ns in NAMESPACES),
            str(fds["root"]),
            uid,
            uid,
            cwd,
            *command,
        ]
        try:
            return _start(live, argv, env, tuple(fds.values()), request.stdin is not None, terminal)
        except (subprocess.SubprocessError, OSError) as e:
            raise SandboxFailed(
                f"sandbox {live.record.id!r} cannot run commands (its cgroup is gone?): {e}"
            ) from e


def _start(
    live: Live,
    argv: list[str],
    env: dict[str, str],
    fds: tuple[int, ...],
    stdin: bool,
    terminal: int | None,
) -> subprocess.Popen:
    fds = (*fds, seccomp.shared_fd())
    if terminal is not None:
        join = preexec_joiner(live.cgroup.procs_files)
        return subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            pass_fds=fds,
            preexec_fn=execution.pty_preexec(join),
        )
    gate_r, gate_w = os.pipe()
    argv[1] = str(gate_r)  # argv[2]: the limits
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            pass_fds=(gate_r, *fds),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        )
        os.close(gate_r)
        gate_r = -1
        live.cgroup.join(proc.pid)
        os.write(gate_w, b"\n")
        return proc
    finally:
        os.close(gate_w)
        if gate_r >= 0:
            os.close(gate_r)
