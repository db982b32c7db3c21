"""One harness episode on one task, from sandbox to `episodes` row: the unit HarnessEnv steps,
rollouts batch and ModelCallEnv builds on.

Why the proxy episode is opened before anything else: every attempt, even one whose sandbox
never started, must leave an `episodes` row with a typed failure kind. Infra failures are data,
and their reward is None, never 0.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Score, Task, Turn
from pomona.errors import SandboxError
from pomona.harnesses import payload
from pomona.harnesses.base import Harness
from pomona.harnesses.proxy_link import ProxyLink
from pomona.harnesses.registry import get as get_harness
from pomona.harnesses.runner import HarnessResult, run, tools_mount
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient

ORACLE = "oracle"  # the scripted model replaying the task's gold solution
SCRIPTED = "scripted"

_installed: set[str] = set()
_install_lock = threading.Lock()


@dataclass
class EpisodeRecord:
    """What one attempt came to. `reward` is None unless the episode ran and was scored."""

    episode: str  # the proxy episode key: joins `calls.episode` and `episodes.episode`
    task: str
    benchmark: str
    harness: str
    model: str
    attempt: int = 0
    reward: float | None = None
    resolved: bool | None = None
    failure_kind: str = "none"
    failure_message: str | None = None
    score: dict[str, Any] | None = None
    final_answer: str | None = None
    calls: int = 0
    artifacts: list[dict[str, str]] = field(default_factory=list)
    started_at: float = 0.0  # wall clock (time.time()) when the attempt began
    harness_started_at: float | None = None  # wall clock when the harness was launched
    # seconds: sandbox, harness, score, total
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.failure_kind == "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pick_task(tasks: list[Task], option: Task | str | None, rng: np.random.Generator) -> Task:
    """The task `option` names (a Task, or an id in `tasks` or the built-in sets), else a draw."""
    if isinstance(option, Task):
        return option
    if isinstance(option, str):
        return next((t for t in tasks if t.id == option), None) or builtin.get(option)
    return tasks[int(rng.integers(len(tasks)))]


def ensure_harness(harness: str | Harness) -> Harness:
    """The harness, installed in the tools payload (once per process; cached on disk)."""
    h = get_harness(harness)
    with _install_lock:
        if h.name not in _installed:
            missing = payload.ensure([h.name])
            if missing:
                raise RuntimeError(f"harness {h.name} cannot be installed: {missing[h.name]}")
            _installed.add(h.name)
    return h


def model_for(model: str, task: Task, harness: Harness) -> tuple[str, list[str] | None]:
    """The model name the harness is given, and the scripted model's commands if any:
    `oracle` replays the task's gold solution, `scripted` answers with no command."""
    if model == ORACLE:
        if task.solution is None:
            raise ValueError(f"task {task.id} has no gold solution for the oracle model")
        return SCRIPTED, harness.scripted(list(task.solution))
    if model == SCRIPTED:
        return SCRIPTED, harness.scripted([])
    return model, None


def open_episode(
    link: ProxyLink, task: Task, harness: Harness, model: str, run_id: str, **fields: Any
) -> dict[str, str]:
    """A proxy episode carrying the run, task and harness columns of its `episodes` row."""
    metadata = {
        "run": run_id,
        "benchmark": task.benchmark,
        "task": task.id,
        "harness": harness.name,
        "harness_version": harness.version,
        **fields.pop("metadata", {}),
    }
    return link.open_episode(model=model, metadata=metadata, **fields)


def start_sandbox(
    client: SandboxClient,
    task: Task,
    link: ProxyLink,
    *,
    image: str | None = None,
    ttl: float = 3600,
    labels: dict[str, str] | None = None,
) -> Sandbox:
    """A sandbox for the task that reaches the proxy and nothing else (or, where the task asks
    for it, the whole network), payload mounted, task laid out. A sandbox whose setup fails is
    deleted before the error goes up."""
    env = task.environment
    sandbox = client.create_sandbox(
        image or env.image,
        network=env.network,
        gateway=link.gateway() if env.network == "gateway" else None,
        mounts=[tools_mount()],
        workdir=env.workdir,
        user=env.user,
        env=env.env,
        timeout=ttl,
        labels={"task": task.id[:63], **(labels or {})},
    )
    try:
        task.prepare(sandbox)
    except BaseException:
        delete_sandbox(sandbox)
        raise
    return sandbox


def delete_sandbox(sandbox: Sandbox | None) -> None:
    if sandbox is not None:
        with contextlib.suppress(SandboxError):
            sandbox.delete()


def score(
    task: Task, sandbox: Sandbox, run: HarnessResult | None = None, proxy: ProxyLink | None = None
) -> tuple[Score | None, str, str | None]:
    """The task's verdict, or why there is none (`sandbox` lost, `verifier` broken)."""
    try:
        return task.evaluate(sandbox, run=run, proxy=proxy), "none", None
    except SandboxError as e:
        return None, "sandbox", f"the sandbox was lost before scoring: {e}"
    except Exception as e:  # noqa: BLE001 - a broken verifier is data, not a crash
        return None, "verifier", f"the scorer failed: {e!r}"


def save_artifacts(link: ProxyLink, key: str, files: dict[str, bytes]) -> list[dict[str, str]]:
    """Transcript files beside the trajectories (DIR/artifacts/<episode>/...), as {name, uri}."""
    if not files or link.trajectories is None:
        return []
    root = (link.trajectories / "artifacts" / key).resolve()
    out = []
    for name, data in sorted(files.items()):
        path = (root / name).resolve()
        if not path.is_relative_to(root):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        out.append({"name": name, "uri": path.as_uri()})
    return out


def grading_artifacts(log_dir: str | None) -> list[dict[str, str]]:
    """The files a scorer kept in its log directory (SWE-bench: the patch, the test output, the
    report), as artifacts of the episode, so the row says where its grading evidence is."""
    if not log_dir or not Path(log_dir).is_dir():
        return []
    files = sorted(p for p in Path(log_dir).iterdir() if p.is_file())
    return [{"name": f"grading/{p.name}", "uri": p.resolve().as_uri()} for p in files]


def close_episode(link: ProxyLink, record: EpisodeRecord) -> None:
    """Write the `episodes` row (the proxy writes it once, at the first close)."""
    link.close_episode(
        record.episode,
        reward=record.reward,
        resolved=record.resolved,
        failure_kind=record.failure_kind,
        failure_message=record.failure_message,
        artifacts=record.artifacts,
    )


def sandbox_lost(sandbox: Sandbox | None) -> bool:
    """Whether the sandbox is gone (deleted, expired, its runtime lost)."""
    if sandbox is None:
        return False
    try:
        sandbox.refresh()
    except SandboxError:
        return True
    return False


def next_turn(task: Task, sandbox: Sandbox) -> tuple[Turn | None, str, str | None]:
    """What the task asks next once the agent is done (a multi-step task's next step), or why
    the episode cannot go on (`sandbox` lost, `verifier`: the step's check or set-up broke)."""
    try:
        return task.next_turn(sandbox), "none", None
    except SandboxError as e:
        return None, "sandbox", f"the sandbox was lost between two turns: {e}"
    except Exception as e:  # noqa: BLE001 - a broken step check is data, not a crash
        return None, "verifier", f"the task could not go on to its next turn: {e!r}"


@contextlib.contextmanager
def kept_alive(sandbox: Sandbox, ttl: float, budget: float) -> Iterator[None]:
    """Heartbeats while a turn longer than the sandbox's TTL allows runs (a later step of a
    multi-step task may have more time than the first, which set the TTL)."""
    sandbox.heartbeat()
    if budget + 600 <= ttl:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(ttl / 3):
            with contextlib.suppress(Exception):
                sandbox.heartbeat()

    beater = threading.Thread(target=beat, daemon=True, name="pomona-heartbeat")
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()


def failure_of(error: BaseException, sandbox: Sandbox | None = None) -> tuple[str, str]:
    """The failure kind of an exception raised while running an episode: a sandbox that
    vanished under the harness shows up as odd harness errors, so its loss is checked first."""
    if isinstance(error, SandboxError) or sandbox_lost(sandbox):
        return "sandbox", f"the sandbox was lost: {type(error).__name__}: {error}"
    return "harness", f"{type(error).__name__}: {error}"


def run_episode(
    task: Task,
    harness: str | Harness,
    model: str,
    *,
    proxy: Any,
    client: SandboxClient,
    timeout: float = 600,
    dialect: str | None = None,
    image: str | None = None,
    run_id: str | None = None,
    attempt: int = 0,
) -> EpisodeRecord:
    """Run `harness` with `model` on `task` to the end and score it. Never raises for a failed
    episode: the record (and the `episodes` row) says what failed."""
    h = ensure_harness(harness)
    link = ProxyLink.of(proxy)
    timeout = task.agent_timeout(timeout)
    run_id = run_id or secrets.token_hex(4)
    t0, wall0 = time.monotonic(), time.time()
    record = EpisodeRecord("", task.id, task.benchmark, h.name, model, attempt, started_at=wall0)
    try:
        name, script = model_for(model, task, h)
        fields: dict[str, Any] = {"script": script} if script is not None else {}
        ep = open_episode(link, task, h, name, run_id, metadata={"attempt": attempt}, **fields)
    except Exception as e:  # noqa: BLE001 - no episode, so no row: the record alone says why
        record.failure_kind, record.failure_message = "proxy", f"could not open an episode: {e!r}"
        return record
    record.episode = ep["key"]
    timings = record.timings
    sandbox = None
    try:
        sandbox = start_sandbox(
            client, task, link, image=image, ttl=timeout + 600, labels={"run": run_id}
        )
        timings["sandbox"] = time.monotonic() - t0
        record.harness_started_at = time.time()
        turn: Turn | None = Turn(task.instruction, timeout)
        number = 0
        while turn is not None:  # one turn for most tasks; a multi-step task's steps in turn
            budget = turn.timeout or timeout
            t1 = time.monotonic()
            with kept_alive(sandbox, timeout + 600, budget):
                result: HarnessResult = run(
                    h,
                    turn.instruction,
                    sandbox,
                    name,
                    link,
                    timeout=budget,
                    dialect=dialect,
                    episode=ep,
                    close=False,
                    mcp=task.environment.mcp,
                )
            timings["harness"] = timings.get("harness", 0.0) + time.monotonic() - t1
            record.final_answer, record.calls = result.final_answer, result.calls
            record.failure_kind, record.failure_message = (
                result.failure_kind,
                result.failure_message,
            )
            prefix = f"turn-{number}/" if number else ""  # the turns' transcripts side by side
            record.artifacts += save_artifacts(
                link, ep["key"], {prefix + k: v for k, v in result.artifacts.items()}
            )
            if not record.ran:
                break
            turn, record.failure_kind, record.failure_message = next_turn(task, sandbox)
            number += 1
        if not record.ran and sandbox_lost(sandbox):
            record.failure_kind = "sandbox"
        if record.ran:
            t2 = time.monotonic()
            verdict, record.failure_kind, record.failure_message = score(
                task, sandbox, result, link
            )
            timings["score"] = time.monotonic() - t2
            if verdict is not None:
                record.reward, record.resolved = verdict.reward, verdict.resolved
                record.score = verdict.model_dump()
                record.artifacts += grading_artifacts(verdict.details.get("log_dir"))
    except Exception as e:  # noqa: BLE001 - one episode's failure is its record, not a crash
        record.failure_kind, record.failure_message = failure_of(e, sandbox)
    finally:
        t3 = time.monotonic()
        delete_sandbox(sandbox)
        timings["sandbox"] = timings.get("sandbox", 0.0) + time.monotonic() - t3
        timings["total"] = time.monotonic() - t0
        close_episode(link, record)
    return record


def read_calls(link: ProxyLink, key: str) -> list[dict[str, Any]]:
    """The recorded calls of one episode, in order (empty when the trajectories are elsewhere)."""
    if link.trajectories is None or not Path(link.trajectories).exists():
        return []
    import pyarrow.compute as pc

    from pomona import trajectories

    table = trajectories.read(link.trajectories, "calls")
    if table.num_rows == 0:
        return []
    rows = table.filter(pc.equal(table["episode"], key)).to_pylist()
    return sorted(rows, key=lambda r: r["started_at"])
