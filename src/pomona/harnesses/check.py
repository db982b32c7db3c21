"""The cross-harness check: every installed harness gets the same file task with the scripted
model, in its own gateway sandbox, and one table says which passed (`pomona harnesses check`).

The task is the harness conformance tool check (reference/harnesses.md): the model's first answer
is a call of the harness's own shell tool running `echo hello > out.txt`, its last is `done`; the
file must hold `hello`, and the proxy must have recorded the calls in the harness's dialect under
the episode's key.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pomona.harnesses import payload
from pomona.harnesses.registry import get, names
from pomona.harnesses.runner import HarnessResult, run, tools_mount
from pomona.orchestrator.sdk.client import Sandbox
from pomona.proxy.control import ProxyControl, gateway, recorded_calls

PROMPT = "Create a file named out.txt containing the word hello, using your shell tool."
SCRIPT = ["echo hello > out.txt"]


@dataclass
class CheckRow:
    harness: str
    version: str
    dialect: str
    passed: bool
    seconds: float
    calls: int
    recorded_dialects: list[str] = field(default_factory=list)
    failure_kind: str = "none"
    note: str = ""
    result: HarnessResult | None = None


def file_task(
    harness: str,
    sandbox: Sandbox,
    proxy: ProxyControl,
    *,
    dialect: str | None = None,
    timeout: float = 180,
) -> CheckRow:
    """Run the file task once in `sandbox` (gateway to `proxy`, payload mounted) and judge it."""
    h = get(harness)
    t0 = time.monotonic()
    result = run(
        h, PROMPT, sandbox, "scripted", proxy, script=SCRIPT, dialect=dialect, timeout=timeout
    )
    seconds = time.monotonic() - t0
    content = sandbox.exec(f"cat {sandbox.info.spec.workdir}/out.txt", timeout=10).stdout
    calls = recorded_calls(proxy, result.episode) or []
    main = [c for c in calls if not c.side]
    recorded = sorted({c.dialect for c in main})
    problems = []
    if content != "hello\n":
        problems.append(f"out.txt holds {content!r}")
    if result.failure_kind != "none":
        problems.append(f"{result.failure_kind}: {result.failure_message}")
    if len(main) < 2 or recorded != [result.dialect]:
        problems.append(f"recorded main calls {len(main)} in {recorded}")
    if any(f"/e/{result.episode}/" not in c.path for c in calls):
        problems.append("a call was recorded without the episode key")
    return CheckRow(
        h.name,
        h.version,
        result.dialect,
        not problems,
        seconds,
        result.calls,
        recorded,
        result.failure_kind,
        "; ".join(problems),
        result,
    )


def check(
    harness_names: list[str] | None = None,
    *,
    runtime: str = "local",
    image: str = "host",
    dialect: str | None = None,
    root: Path | str = payload.DEFAULT_ROOT,
) -> list[CheckRow]:
    """Install what is missing, then run the file task for each harness."""
    from pomona.orchestrator.sdk.client import SandboxClient
    from pomona.proxy import ProxyConfig, ProxyServer

    wanted = harness_names or names()
    missing = payload.ensure(wanted, root)
    rows: list[CheckRow] = []
    with (
        tempfile.TemporaryDirectory(prefix="pomona-check-") as tmp,
        ProxyServer(ProxyConfig(trajectories=Path(tmp) / "runs")) as proxy,
        SandboxClient(runtime) as client,
    ):
        allowed = gateway(proxy)
        for name in wanted:
            h = get(name)
            if not h.standalone:
                note = "a benchmark's own loop: checked by playing that benchmark's tasks"
                rows.append(
                    CheckRow(h.name, h.version, h.dialects[0], False, 0.0, 0, [], "-", note)
                )
                continue
            if name in missing:
                rows.append(
                    CheckRow(
                        h.name,
                        h.version,
                        h.dialects[0],
                        False,
                        0.0,
                        0,
                        failure_kind="-",
                        note=f"not installed: {missing[name]}",
                    )
                )
                continue
            with client.create_sandbox(
                image, network="gateway", gateway=allowed, mounts=[tools_mount(root)]
            ) as sb:
                rows.append(
                    file_task(name, sb, proxy, dialect=dialect if dialect in h.dialects else None)
                )
    return rows


def table(rows: list[CheckRow]) -> str:
    """A Markdown table, the shape the README shows."""
    lines = [
        "| harness | version | dialect | file task | seconds | calls recorded | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        status = "pass" if r.passed else ("skip" if r.failure_kind == "-" else "FAIL")
        lines.append(
            f"| {r.harness} | {r.version} | {r.dialect} | {status} | {r.seconds:.1f} | "
            f"{r.calls} | {r.note} |"
        )
    return "\n".join(lines)
