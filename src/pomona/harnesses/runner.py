"""One harness run: point an unmodified harness at a proxy episode, run it headless in a sandbox,
collect its transcript, and judge how it ended from its effects, never from its exit code.

    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy, SandboxClient() as client:
        sb = client.create_sandbox("host", network="gateway", gateway=gateway(proxy),
                                   mounts=[tools_mount()])
        result = run("pi", "create out.txt", sb, "scripted", proxy, script=["echo hello > out.txt"])
"""

from __future__ import annotations

import base64
import fnmatch
import io
import posixpath
import secrets
import shlex
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.errors import FailureKind, SandboxFailed, UsageError
from pomona.harnesses.base import TOOLS_MOUNT, Harness, Outputs, RunContext
from pomona.harnesses.mcp import McpServer, McpUnsupported, check_unique
from pomona.harnesses.payload import DEFAULT_ROOT
from pomona.harnesses.registry import get
from pomona.orchestrator.sdk.client import Sandbox
from pomona.orchestrator.types import Mount
from pomona.proxy.control import ProxyControl, RecordedCall, proxy_control, recorded_calls

_CONNECT_ERRORS = (
    "ECONNREFUSED",
    "Connection refused",
    "ConnectError",
    "connection refused",
    "Failed to connect",
    "Unable to connect",
)


@dataclass
class HarnessResult:
    """How one harness run ended. `failure_kind` is judged from effects: the calls the proxy
    recorded and the harness's own account of its turn, not the exit code."""

    harness: str
    version: str
    dialect: str
    episode: str  # the proxy episode key
    exit_code: int
    timed_out: bool
    completed: bool  # the harness itself says it finished its turn
    final_answer: str | None
    failure_kind: FailureKind
    failure_message: str | None
    calls: int  # calls the proxy recorded for the episode (side calls included)
    main_calls: int | None  # policy turns, when the trajectories can be read from here
    seconds: float
    transcript: list[dict[str, Any]] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)  # transcript files, raw
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.failure_kind == "none"


def tools_mount(root: Path | str = DEFAULT_ROOT) -> Mount:
    """The payload, read-only at /opt/pomona/tools: pass it in create_sandbox(mounts=[...])."""
    return Mount(source=str(root), target=TOOLS_MOUNT, read_only=True)


def _inside_url(sandbox: Sandbox, link: ProxyControl) -> str:
    """The proxy's root URL as the sandbox sees it: in gateway mode the one allowed host:port
    appears at 127.0.0.1:<port> inside."""
    spec = sandbox.info.spec
    if str(spec.network) == "gateway":
        return f"http://127.0.0.1:{spec.gateway_address[1]}"
    if str(spec.network) == "none":
        raise UsageError(
            "the sandbox has network='none': a harness cannot reach the proxy; "
            "create it with network='gateway', gateway=gateway(link)"
        )
    return link.url


def _setup_script(dirs: list[str], files: dict[str, str]) -> str:
    """Create directories and config files as the sandbox user (so the harness owns them),
    with nothing but POSIX sh and coreutils, which even a minimal image has."""
    lines = ["set -e", "umask 077", "mkdir -p " + " ".join(shlex.quote(d) for d in dirs)]
    for path, text in files.items():
        data = base64.b64encode(text.encode()).decode()
        lines.append(f"mkdir -p {shlex.quote(posixpath.dirname(path))}")
        lines.append(f"printf %s {data} | base64 -d > {shlex.quote(path)}")
    return "\n".join(lines)


def _scratch(sandbox: Sandbox) -> str:
    """Where run directories go: not under /tmp when avoidable, because Codex refuses to create
    its helper binaries (the apply_patch alias) under a temporary directory."""
    probe = (
        'for d in /var/tmp "$HOME" /tmp; do [ -d "$d" ] && [ -w "$d" ] && echo "$d" && exit 0; done'
    )
    found = sandbox.exec(probe, timeout=30).stdout.strip()
    return found.rstrip("/") or "/tmp"


def _kill_run(run_id: str) -> str:
    """Kill whatever the run left behind, found by the marker in its environment (children that
    left the process group, daemons the harness started)."""
    marker = shlex.quote(f"POMONA_RUN={run_id}")
    return (
        f'for p in /proc/[0-9]*; do grep -qxzF {marker} "$p/environ" 2>/dev/null && '
        'kill -9 "${p#/proc/}" 2>/dev/null; done; true'
    )


def _matches(name: str, pattern: str) -> bool:
    return any(
        fnmatch.fnmatch(name, p)
        for p in (pattern, pattern.replace("**/", ""), pattern + "-wal", pattern + "-shm")
    )


def _collect(sandbox: Sandbox, run_dir: str, globs: tuple[str, ...]) -> dict[str, bytes]:
    if not globs:
        return {}
    try:
        data = sandbox.download_dir(run_dir)
    except Exception:
        return {}
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if member.isfile() and any(_matches(name, g) for g in globs):
                extracted = tar.extractfile(member)
                if extracted is not None:
                    files[name] = extracted.read()
    return files


def judge(
    timed_out: bool, completed: bool, calls: list[RecordedCall] | None, count: int, out: Outputs
) -> tuple[FailureKind, str | None]:
    """The failure kind, from what happened rather than from the exit code."""
    main = [c for c in calls or [] if not c.side]
    last = main[-1] if main else None
    if last is not None and last.status == "upstream_error":
        # a harness still retrying a dead upstream when its time ran out failed on the upstream
        stopped = ", until the harness was stopped at its timeout" if timed_out else ""
        return (
            "upstream",
            f"the model upstream failed ({last.status_code}) on the last turn{stopped}",
        )
    if last is not None and last.status == "context_exceeded":
        # the conversation outgrew the model's context: how the policy played, graded as it
        # left the task (counting it as infra would drop a failed episode from the denominator)
        return "none", None
    if timed_out:
        return "timeout", "the harness was stopped at its timeout"
    if last is not None and last.status in ("refused", "client_error"):
        return "proxy", f"the proxy refused the last turn ({last.status_code})"
    if completed:
        return "none", None
    if count == 0:
        if any(e in out.stdout + out.stderr for e in _CONNECT_ERRORS):
            return "proxy", "the harness could not reach the proxy"
        return "harness", f"the harness made no model call (exit {out.exit_code})"
    return "harness", f"the harness did not finish its turn (exit {out.exit_code})"


def _open(
    h: Harness, link: ProxyControl, model: str, script: list[str] | None, metadata: dict[str, Any]
) -> dict[str, str]:
    """A new proxy episode for one run (when the caller opened none)."""
    return link.open_episode(
        model=model,
        metadata={"harness": h.name, "harness_version": h.version, **metadata},
        script=h.scripted(script) if script is not None else None,
    )


def _prepared(
    h: Harness, sandbox: Sandbox, ctx: RunContext, workdir: str
) -> tuple[str, dict[str, str]]:
    """The harness's config laid out in the sandbox; its command line and environment."""
    launch = h.launch(ctx)
    setup = sandbox.exec(_setup_script([ctx.home, workdir, *launch.dirs], launch.files), timeout=60)
    if setup.exit_code != 0:
        raise SandboxFailed(f"could not prepare the run directory: {setup.stderr.strip()}")
    run_id = ctx.run_dir.rsplit("-", 1)[-1]
    env = {"HOME": ctx.home, "PWD": workdir, "POMONA_RUN": run_id, **launch.env}
    command = (
        f'export PATH="$PATH:{TOOLS_MOUNT}/bin"\ncd {shlex.quote(workdir)} || exit 97\n'
        f"exec {launch.shell()} </dev/null"
    )
    return command, env


def run(
    harness: str | Harness,
    task_prompt: str,
    sandbox: Sandbox,
    model: str,
    proxy: ProxyControl | str,
    *,
    timeout: float = 600,
    script: list[str] | None = None,
    dialect: str | None = None,
    workdir: str | None = None,
    metadata: dict[str, Any] | None = None,
    episode: dict[str, str] | None = None,
    close: bool = True,
    mcp: Sequence[McpServer] = (),
) -> HarnessResult:
    """Run `harness` on `task_prompt` in `sandbox` (a sync Sandbox with the payload mounted at
    /opt/pomona/tools), its model calls going to a new episode of `proxy` (a ProxyServer, a URL or
    a ProxyControl) served by `model`. `script` is the scripted model's commands. The episode is
    closed with the judged failure kind unless `close=False` (a caller that scores it first).
    `mcp` servers are given to the harness through its own config (pomona.harnesses.mcp)."""
    h = get(harness)
    chosen = h.check_dialect(dialect)
    servers = check_unique(mcp)
    if servers and not h.takes_mcp:
        raise McpUnsupported(f"{h.name} has no MCP client Pomona can configure")
    link = proxy_control(proxy)
    episode = episode or _open(h, link, model, script, metadata or {})
    key = episode["key"]
    root = f"{_inside_url(sandbox, link)}/e/{key}"
    workdir = workdir or sandbox.info.spec.workdir
    run_id = secrets.token_hex(6)
    ctx = RunContext(
        prompt=task_prompt,
        model=model,
        base_url=f"{root}/v1",
        anthropic_base_url=root,
        dialect=chosen,
        workdir=workdir,
        run_dir=f"{_scratch(sandbox)}/pomona-run-{run_id}",
        timeout=timeout,
        mcp=servers,
    )
    t0 = time.monotonic()
    command, env = _prepared(h, sandbox, ctx, workdir)
    result = sandbox.exec(command, timeout=timeout, env=env, cwd=workdir)
    sandbox.exec(_kill_run(run_id), timeout=30)
    seconds = time.monotonic() - t0
    out = Outputs(
        result.stdout,
        result.stderr,
        result.exit_code,
        _collect(sandbox, ctx.run_dir, h.transcript_globs),
    )
    completed = h.completed(out) and not result.timed_out
    calls = recorded_calls(link, key)
    count = len(calls) if calls is not None else link.call_count(key)
    kind, message = judge(result.timed_out, completed, calls, count, out)
    if close:
        link.close_episode(key, failure_kind=kind, failure_message=message)
    return HarnessResult(
        harness=h.name,
        version=h.version,
        dialect=chosen,
        episode=key,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        completed=completed,
        final_answer=h.final_answer(out),
        failure_kind=kind,
        failure_message=message,
        calls=count,
        main_calls=None if calls is None else sum(not c.side for c in calls),
        seconds=seconds,
        transcript=h.transcript(out),
        artifacts=out.files,
        stdout=result.stdout,
        stderr=result.stderr,
    )
