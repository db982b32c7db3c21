"""An episode's trusted side, from outside: lay out the benchmark's files and Pomona's programs
in the sandbox as root (benchmark/sandbox/claw_common.py says where), start the host, and run
root's controls; and the verifier sandbox, fresh and untouched by the agent, where graders run.

The agent runs as the sandbox's ordinary user: it can read the programs it runs itself (the MCP
relay, the native loop's launcher, Claw-Eval's sandbox server) but not the benchmark's files
(graders, answers), the host's record or the services' sockets.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pomona.benchmarks.claw.checkout import tar
from pomona.benchmarks.task import TaskSetupFailed, VerifierError
from pomona.harnesses.base import TOOLS_MOUNT
from pomona.harnesses.mcp import McpServer
from pomona.orchestrator.sdk.client import Sandbox
from pomona.proxy.control import ProxyControl, gateway

HOME = "/opt/pomona-claw"  # root-owned; see sandbox/claw_common.py
PYTHON = f"{TOOLS_MOUNT}/bin/pomona-python"  # the claw-eval payload: CPython and the SDKs
PROGRAMS = Path(__file__).parent / "sandbox"
MCP_NAME = "claw"  # the tools' MCP server: harnesses show mcp__claw__TOOL, claw__TOOL, ...
HOST_PROGRAMS = ("claw_common.py", "claw_host.py", "claw_loop.py", "claw_ctl.py", "claw_user.py")
AGENT_PROGRAMS = ("claw_common.py", "claw_relay.py", "claw_native.py")
OUTPUT_CAP = 512 << 20  # env snapshots carry base64 screenshots


class ServiceDown(VerifierError):
    """The trusted side was not there at grading time (a service or the host died): an
    infrastructure failure, never a score of 0."""


def relay() -> McpServer:
    """The MCP server every Claw-Eval task gives a harness: its tools, relayed to the host."""
    return McpServer(MCP_NAME, command=(PYTHON, f"{HOME}/agent/claw_relay.py"))


def proxy_inside(sandbox: Sandbox) -> str:
    """The proxy's root URL as seen from inside a gateway-mode sandbox."""
    address = getattr(sandbox.info.spec, "gateway_address", None)
    if not address:
        raise VerifierError("a Claw task needs a gateway sandbox: its judge and user are models")
    return f"http://127.0.0.1:{address[1]}"


def programs(names: tuple[str, ...]) -> dict[str, bytes]:
    return {name: (PROGRAMS / name).read_bytes() for name in names}


def lay_out(sandbox: Sandbox, parts: Mapping[str, Mapping[str, bytes]], private: bool) -> None:
    """Put each part (bench, bin, agent, run: name -> files) under HOME as root. `private`: the
    bench, bin and run parts are root's alone (an episode sandbox, where the agent works)."""
    staging = f"/tmp/pomona-claw-{secrets.token_hex(4)}"
    files = {f"{part}/{name}": data for part, tree in parts.items() for name, data in tree.items()}
    sandbox.upload_dir(staging, tar(files))
    closed = f"chmod -R go-rwx {HOME}/bench {HOME}/bin {HOME}/run; " if private else ""
    script = (
        f"set -e; rm -rf {HOME}; mkdir -p {HOME}/run; "
        f'for p in {staging}/*; do mv "$p" {HOME}/; done; rm -rf {staging}; '
        f"chown -R 0:0 {HOME}; chmod -R a+rX,go-w {HOME}; {closed}"
    )
    done = sandbox.exec(script, user="root", timeout=300)
    if done.exit_code != 0:
        raise TaskSetupFailed(f"could not lay out the benchmark's files: {done.stderr.strip()}")


def start_host(sandbox: Sandbox, task_dir: str, user: dict[str, Any] | None) -> None:
    """Start the host as root and wait until its services answer (or say why they did not)."""
    argv = [PYTHON, f"{HOME}/bin/claw_host.py", "--task-dir", task_dir]
    if user is not None:
        argv += ["--user", f"{HOME}/run/user.json"]
        put = f"cat > {HOME}/run/user.json && chmod 600 {HOME}/run/user.json"
        sandbox.exec(put, user="root", stdin=json.dumps(user), timeout=60)
    # from /workspace, Claw-Eval's container's working directory, with `python` on its PATH as
    # there (env snapshot commands run `python ...`): the payload's CPython
    start = (
        f"mkdir -p {HOME}/pybin && ln -sf {PYTHON} {HOME}/pybin/python && "
        f"ln -sf {PYTHON} {HOME}/pybin/python3 && export PATH={HOME}/pybin:$PATH && "
        f"cd /workspace && (setsid {shlex.join(argv)} > {HOME}/run/host.log 2>&1 < /dev/null &"
        f" echo $! > {HOME}/run/host.pid)\n"
        f"for i in $(seq 1 1500); do\n"
        f"  [ -f {HOME}/run/ready.json ] && exit 0\n"
        f"  kill -0 $(cat {HOME}/run/host.pid) 2>/dev/null || break\n"
        f"  sleep 0.2\ndone\ntail -c 3000 {HOME}/run/host.log; exit 1"
    )
    done = sandbox.exec(start, user="root", timeout=400)
    if done.exit_code != 0:
        raise TaskSetupFailed(f"the task's services did not start: {done.stdout.strip()[-2000:]}")


def ctl(sandbox: Sandbox, *args: str, timeout: float = 600) -> dict[str, Any]:
    """One of root's controls (sandbox/claw_ctl.py); its JSON answer."""
    command = shlex.join([PYTHON, f"{HOME}/bin/claw_ctl.py", *args])
    done = sandbox.exec(command, user="root", timeout=timeout, output_cap=OUTPUT_CAP)
    if done.exit_code != 0 or done.truncated:
        said = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
        raise ServiceDown(f"the trusted side could not {args[0]} the episode: {said[-1][:1500]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@contextlib.contextmanager
def verifier(episode: Sandbox, link: ProxyControl, ttl: float = 3600) -> Iterator[Sandbox]:
    """A fresh sandbox like the episode's (its image, the payload), reaching only the proxy
    (the judge's model), deleted afterwards."""
    from pomona.harnesses.runner import tools_mount

    spec = episode.info.spec
    sandbox = episode._root.create_sandbox(
        spec.image,
        network="gateway",
        gateway=gateway(link),
        mounts=[tools_mount()],
        timeout=ttl,
        labels={"purpose": "claw-verify"},
    )
    try:
        yield sandbox
    finally:
        with contextlib.suppress(Exception):
            sandbox.delete()


def run_grader(sandbox: Sandbox, argv: list[str], timeout: float) -> dict[str, Any]:
    """Run a grading program as root in the verifier sandbox; its JSON answer. A grader that
    crashes or runs past `timeout` gives no verdict: a verifier failure, never a 0."""
    done = sandbox.exec(shlex.join(argv), user="root", timeout=timeout, output_cap=OUTPUT_CAP)
    if done.timed_out:
        raise VerifierError(f"the grader ran past {timeout:.0f} s")
    if done.exit_code != 0:
        raise VerifierError(f"the grader failed: {done.stderr.strip()[-1500:]}")
    try:  # the last line: graders print as they go
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise VerifierError(f"the grader gave no verdict: {done.stdout[-500:]!r}") from e
