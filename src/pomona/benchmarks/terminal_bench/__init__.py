"""Terminal-Bench 2.0 tasks in harbor's layout, verified by harbor's reward contract where the
agent cannot tamper with the verdict (terminal_bench/verifier.py), configured by harbor's task.toml
(terminal_bench/config.py).

    <task>/instruction.md        the agent's input (leading canary comments dropped, as harbor)
    <task>/task.toml             config
    <task>/environment/          Dockerfile (harbor builds it), setup.sh (Pomona's offline tasks)
    <task>/tests/test.sh         the verifier, uploaded to /tests only after the agent has run
    <task>/solution/solve.sh     the oracle
    <task>/steps/<name>/         a multi-step task's steps: instruction.md, workdir/ (copied into
                                 the workdir before the step, its setup.sh run), tests/, solution/
    <task>/environment/docker-compose.yaml   sidecar services besides `main`, each in a sandbox
                                 of its own (terminal_bench/services.py)

Where a task names `[environment] docker_image`, it runs there (as root unless `[agent].user`
names another user). Pomona's local tasks instead set `[metadata] pomona_image = "host"`: they run
on the host image, `environment/setup.sh` builds their state in the workdir (their Dockerfile
runs the same script, so harbor agrees) and pytest is installed from Pomona's own environment,
so everything works offline.

A multi-step task is one episode in one sandbox: the agent gets step 1's instruction; when it is
done the runner asks `next_turn`, which verifies that step (as harbor: in a sandbox of its own),
stops early when the step falls short of its `min_reward`, and sets up the next step (its workdir
files, setup.sh, healthcheck) before handing over its instruction. `evaluate` verifies the step the
agent ended on and combines the steps' rewards by `multi_step_reward_strategy` (per-key mean, or
the final step's). A step the agent never reached counts 0; steps skipped after a failed gate are
left out, as harbor leaves them out.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import shlex
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pomona.benchmarks.pytools import install_pytest
from pomona.benchmarks.task import (
    Environment,
    Score,
    Task,
    TaskSetupFailed,
    Turn,
    VerifierError,
)
from pomona.benchmarks.terminal_bench.archives import sanitized, tar_of
from pomona.benchmarks.terminal_bench.config import (
    DEFAULT_WORKDIR,
    MAIN_SERVICE,
    StepConfig,
    TbConfig,
    read_config,
    resolve_env,
)
from pomona.benchmarks.terminal_bench.services import Service, ServiceGroup, read_services
from pomona.benchmarks.terminal_bench.verifier import (
    TbScorer,
    copy_artifacts,
    parse_reward,
    reward_of,
)
from pomona.benchmarks.verification import record
from pomona.errors import NoData, UsageError
from pomona.orchestrator.sdk.client import Sandbox

if TYPE_CHECKING:
    from pomona.harnesses.runner import HarnessResult
    from pomona.proxy.control import ProxyControl

__all__ = [
    "DATA",
    "DEFAULT_WORKDIR",
    "TbConfig",
    "TbScorer",
    "TbTask",
    "combine",
    "copy_artifacts",
    "load_task",
    "parse_reward",
    "read_config",
    "resolve_env",
    "sanitized",
    "solve_commands",
    "tasks",
]

DATA = Path(__file__).parents[1] / "data" / "terminal_bench"
STEP_MARKER = "/tmp/pomona-tb-step"  # root-owned, world-readable: which step the agent is on
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def strip_canary(text: str) -> str:
    """harbor's: leading canary comment lines (and the blank lines after them) are not shown to
    the agent."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def solve_commands(solve_sh: str, env: dict[str, str] | None = None) -> list[str]:
    """The oracle's script: solve.sh written to /tmp/solution and run, as one shell command."""
    return [_exports(env) + _solve(solve_sh)]


def _exports(env: dict[str, str] | None) -> str:
    return "".join(f"export {k}={shlex.quote(v)} && " for k, v in (env or {}).items())


def _solve(solve_sh: str) -> str:
    data = base64.b64encode(solve_sh.encode()).decode()
    return (
        f"mkdir -p /tmp/solution && echo {data} | base64 -d > /tmp/solution/solve.sh && "
        "bash /tmp/solution/solve.sh"
    )


def steps_solve_command(solutions: dict[str, str], env: dict[str, str] | None = None) -> list[str]:
    """The oracle of a multi-step task: one command, the same in every step (each step's run is a
    new conversation, and the scripted model replays its script from the start), which runs the
    solution of the step the agent is on."""
    cases = "".join(f"{shlex.quote(name)}) {_solve(text)} ;; " for name, text in solutions.items())
    return [
        f'{_exports(env)}case "$(cat {STEP_MARKER})" in {cases}'
        '*) echo "no solution for this step" >&2; exit 1 ;; esac'
    ]


@dataclass
class _Progress:
    """One episode's way through a multi-step task (kept host-side: the agent cannot touch it)."""

    index: int = 0
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False  # a step fell short of its min_reward: the rest are skipped


@dataclass(frozen=True)
class TbTask(Task):
    """A harbor task; with a setup script, prepare() builds its state offline."""

    scorer: TbScorer  # (the base's field, narrowed: the task and its verifier work together)
    services: tuple[Service, ...] = ()  # sidecars: environment/docker-compose.yaml
    _progress: weakref.WeakKeyDictionary[Sandbox, _Progress] = field(
        default_factory=weakref.WeakKeyDictionary, init=False, compare=False, repr=False
    )
    _groups: weakref.WeakKeyDictionary[Sandbox, ServiceGroup] = field(
        default_factory=weakref.WeakKeyDictionary, init=False, compare=False, repr=False
    )
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, compare=False, repr=False
    )

    @property
    def config(self) -> TbConfig:
        if self.scorer.config is None:
            raise UsageError(f"task {self.id}: its TbScorer was made without the task's config")
        return self.scorer.config

    @property
    def steps(self) -> tuple[StepConfig, ...]:
        return self.config.steps

    def prepare(self, sandbox: Sandbox) -> None:
        """The agent's sandbox: the environment, then the first step of a multi-step task."""
        self.build(sandbox)
        if self.steps:
            with self._lock:
                self._progress[sandbox] = _Progress()
            self._begin_step(sandbox, self.steps[0])

    def build(self, sandbox: Sandbox) -> None:
        """The task's environment (what a separate verifier's fresh sandbox gets too)."""
        setup = self.metadata.get("setup_script")
        workdir = self.environment.workdir
        if setup is not None:
            sandbox.write_file("/tmp/pomona-setup.sh", setup)
            result = sandbox.exec(
                "bash /tmp/pomona-setup.sh && rm -f /tmp/pomona-setup.sh", cwd=workdir, timeout=600
            )
            if result.exit_code != 0:
                raise TaskSetupFailed(
                    f"task {self.id}: environment setup failed: {result.stderr.strip()}"
                )
            install_pytest(sandbox)
        if self.services:
            self._start_services(sandbox)
        if self.config.healthcheck:
            self.config.healthcheck.wait(sandbox, workdir, f"task {self.id}")

    # --- sidecar services ----------------------------------------------------------------------

    def _start_services(self, sandbox: Sandbox) -> None:
        """The sidecars, fresh, reachable from `sandbox` and gone with it."""
        spec = sandbox.info.spec
        group = ServiceGroup.start(
            self.services,
            sandbox._root,
            ttl=spec.timeout or 3600,
            labels={"task": self.id[:63]},
        )
        try:
            group.attach(sandbox, owner=True)
        except BaseException:
            group.close()
            raise
        with self._lock:
            self._groups[sandbox] = group

    def services_of(self, sandbox: Sandbox) -> ServiceGroup | None:
        """The sidecars `sandbox` was built with (None for a task without any)."""
        with self._lock:
            return self._groups.get(sandbox)

    # --- multi-step --------------------------------------------------------------------------

    def _begin_step(self, sandbox: Sandbox, step: StepConfig) -> None:
        """harbor's step setup: the step's workdir/ files copied into the workdir as the agent's
        user, its setup.sh run there, its healthcheck; a shared verifier's leftovers cleared."""
        workdir, user = self.environment.workdir, self.environment.user
        clear = (
            "rm -rf /tests /logs/verifier && "
            if self.scorer.resolved_mode(step) == "shared"
            else ""
        )
        marked = sandbox.exec(
            f"{clear}printf %s {shlex.quote(step.name)} > {STEP_MARKER} && chmod 644 {STEP_MARKER}",
            user="root",
            timeout=60,
        )
        if marked.exit_code != 0:
            raise TaskSetupFailed(f"step {step.name!r}: {marked.stderr.strip()}")
        files = Path(self.metadata["task_dir"]) / "steps" / step.name / "workdir"
        if files.is_dir():
            staging = f"/tmp/pomona-step-{step.name}"
            sandbox.upload_dir(staging, sanitized(tar_of(files)))
            sandbox.exec(f"chmod -R a+rX {shlex.quote(staging)}", user="root", timeout=60)
            copied = sandbox.exec(
                f"cp -R {shlex.quote(staging)}/. {shlex.quote(workdir)}/", user=user, timeout=120
            )
            sandbox.exec(f"rm -rf {shlex.quote(staging)}", user="root", timeout=60)
            if copied.exit_code != 0:
                raise TaskSetupFailed(
                    f"step {step.name!r}: could not copy its workdir files: {copied.stderr.strip()}"
                )
            if (files / "setup.sh").is_file():
                done = sandbox.exec("bash setup.sh", cwd=workdir, user=user, timeout=600)
                if done.exit_code != 0:
                    raise TaskSetupFailed(
                        f"step {step.name!r}: setup.sh exited {done.exit_code}: "
                        f"{done.stderr.strip()}"
                    )
        if step.healthcheck:
            step.healthcheck.wait(sandbox, workdir, f"step {step.name!r}")

    def _verify_step(self, sandbox: Sandbox, progress: _Progress) -> dict[str, Any]:
        step = self.steps[progress.index]
        artifacts = self.scorer.verify_phase(self, sandbox, step)
        score = self.scorer.score(self, artifacts)
        trusted = score.details["verdict"] not in (record.SPOOF, record.SUSPECT)
        verdict = {
            "step": step.name,
            "rewards": score.details["rewards"] if trusted else {"reward": 0.0},
            "verdict": score.details["verdict"],
            "mode": artifacts.get("mode"),
            "network": artifacts.get("network"),
            "log_dir": artifacts.get("log_dir"),
            "test_stdout": artifacts["files"].get("test-stdout.txt", "")[-2000:],
        }
        progress.verdicts.append(verdict)
        return verdict

    def _progress_of(self, sandbox: Sandbox) -> _Progress:
        with self._lock:
            progress = self._progress.get(sandbox)
        if progress is None:
            raise VerifierError(
                f"task {self.id}: this sandbox was not prepared for the task (Task.prepare)"
            )
        return progress

    def next_turn(self, sandbox: Sandbox) -> Turn | None:
        if not self.steps:
            return None
        progress = self._progress_of(sandbox)
        if progress.stopped or progress.index == len(self.steps) - 1:
            return None  # evaluate() verifies the step the agent ended on
        step = self.steps[progress.index]
        verdict = self._verify_step(sandbox, progress)
        if _falls_short(verdict["rewards"], step.min_reward):
            progress.stopped = True
            return None
        progress.index += 1
        following = self.steps[progress.index]
        self._begin_step(sandbox, following)
        return Turn(
            self.metadata["instructions"][progress.index], self.config.agent_timeout_of(following)
        )

    def evaluate(
        self, sandbox: Sandbox, run: HarnessResult | None = None, proxy: ProxyControl | None = None
    ) -> Score:
        if not self.steps:
            return super().evaluate(sandbox, run, proxy)
        progress = self._progress_of(sandbox)
        if not progress.stopped:
            self._verify_step(sandbox, progress)
        with self._lock:
            self._progress.pop(sandbox, None)
        reached = len(progress.verdicts)
        unreached = (
            []
            if progress.stopped
            else [{"step": s.name, "rewards": {}, "reached": False} for s in self.steps[reached:]]
        )
        counted = progress.verdicts + unreached
        rewards = combine([v["rewards"] for v in counted], self.config.reward_strategy)
        reward = reward_of(rewards)
        verdict = _worst([v.get("verdict", record.UNRESOLVED) for v in progress.verdicts])
        if verdict in (record.RESOLVED, record.UNRESOLVED):
            verdict = record.RESOLVED if reward == 1.0 else record.UNRESOLVED
        return Score(
            reward=reward,
            resolved=verdict == record.RESOLVED,
            details={
                "verdict": verdict,
                "log_dir": progress.verdicts[-1].get("log_dir"),
                "rewards": rewards,
                "steps": counted,
                "strategy": self.config.reward_strategy,
                "stopped_after": progress.verdicts[-1]["step"] if progress.stopped else None,
                "verifier_mode": progress.verdicts[-1]["mode"],
            },
        )


def _worst(verdicts: list[str]) -> str:
    """A multi-step task's verdict: a spoof or a suspect step makes the whole one so."""
    for bad in (record.SPOOF, record.SUSPECT):
        if bad in verdicts:
            return bad
    return record.UNRESOLVED


def combine(steps: list[dict[str, float]], strategy: str) -> dict[str, float]:
    """harbor's trial reward from its steps' rewards: `final` is the last step's, `mean` the
    mean per key over the steps (a key a step lacks counts 0)."""
    if strategy == "final":
        return steps[-1] or {"reward": 0.0}
    keys = sorted({k for rewards in steps for k in rewards}) or ["reward"]
    return {k: sum(rewards.get(k, 0.0) for rewards in steps) / len(steps) for k in keys}


def _falls_short(rewards: dict[str, float], minimum: float | dict[str, float] | None) -> bool:
    """harbor's gate: a number gates the `reward` key, a table each key it names; a missing key
    counts as minus infinity."""
    if minimum is None:
        return False
    wanted = {"reward": minimum} if isinstance(minimum, float) else minimum
    return any(rewards.get(k, float("-inf")) < v for k, v in wanted.items())


# --- loading -------------------------------------------------------------------------------------


def _check_services(task_dir: Path, cfg: TbConfig, names: set[str]) -> None:
    """Every artifact and collect hook names a service the task has."""
    steps = cfg.steps or ()
    used = [a.service for a in cfg.artifacts + tuple(a for s in steps for a in s.artifacts)]
    used += [c.service for v in (cfg.verifier, *(s.verifier for s in steps)) for c in v.collect]
    if unknown := sorted({u for u in used if u != MAIN_SERVICE and u not in names}):
        raise UsageError(
            f"{task_dir}: artifacts or collect hooks name services the task does not have: "
            f"{', '.join(unknown)}"
        )


def _step_instruction(task_dir: Path, step: StepConfig) -> str:
    path = task_dir / "steps" / step.name / "instruction.md"
    if not path.is_file():
        raise UsageError(f"{task_dir}: step {step.name!r} has no steps/{step.name}/instruction.md")
    return strip_canary(path.read_text())


def _oracle(task_dir: Path, cfg: TbConfig) -> tuple[str, ...] | None:
    env = resolve_env(cfg.solution_env)
    shared = task_dir / "solution" / "solve.sh"
    if not cfg.steps:
        return tuple(solve_commands(shared.read_text(), env)) if shared.is_file() else None
    solutions = {}
    for step in cfg.steps:
        own = task_dir / "steps" / step.name / "solution" / "solve.sh"
        chosen = own if own.is_file() else shared
        if not chosen.is_file():
            return None
        solutions[step.name] = chosen.read_text()
    return tuple(steps_solve_command(solutions, env))


def _agent_sandbox(task_dir: Path, cfg: TbConfig) -> tuple[str, str | None]:
    """The agent sandbox's network and user, the same for every step: a Pomona sandbox keeps
    both from its creation (harbor likewise refuses to switch a static environment's policy)."""
    phases = cfg.steps or (None,)
    networks = {cfg.agent_phase(s).agent_sandbox() for s in phases}
    users = {(s.agent_user if s and s.agent_user else cfg.agent_user) for s in phases}
    if len(networks) > 1:
        raise UsageError(
            f"{task_dir}: steps ask for different agent networks "
            f"({', '.join(sorted(networks))}), but a sandbox keeps the network it "
            "was created with"
        )
    if len(users) > 1:
        raise UsageError(
            f"{task_dir}: steps run the agent as different users, but a sandbox "
            "keeps the user it was created with"
        )
    return networks.pop(), users.pop()


def load_task(
    task_dir: str | Path,
    benchmark: str = "terminal-bench",
    verifier_mode: str | None = None,
    logs: str | Path | None = None,
) -> TbTask:
    """A harbor task directory as a task; `logs` is where each verification's evidence goes."""
    task_dir = Path(task_dir)
    cfg = read_config(task_dir)
    if not cfg.image:
        raise UsageError(
            f"{task_dir}: no prebuilt image; Pomona does not build Dockerfiles: set "
            "[environment] docker_image (or [metadata] pomona_image)"
        )
    services = read_services(task_dir)
    _check_services(task_dir, cfg, {s.name for s in services})
    network, agent_user = _agent_sandbox(task_dir, cfg)
    scorer = TbScorer(task_dir, cfg, verifier_mode)
    if logs is not None:
        scorer = dataclasses.replace(scorer, root=str(logs))
    for step in cfg.steps or (None,):
        scorer.check_network(network, step)
    setup = task_dir / "environment" / "setup.sh"
    host = cfg.image == "host"
    if cfg.steps:
        instructions = [_step_instruction(task_dir, s) for s in cfg.steps]
    else:
        instructions = [strip_canary((task_dir / "instruction.md").read_text())]
    first = cfg.steps[0] if cfg.steps else None
    return TbTask(
        id=cfg.name or f"{benchmark}/{task_dir.name}",
        benchmark=benchmark,
        instruction=instructions[0],
        scorer=scorer,
        environment=Environment(
            image=cfg.image,
            workdir=cfg.workdir,
            user=agent_user or ("pomona" if host else "root"),
            mcp=cfg.mcp_servers,
            network=network,
            env=resolve_env(cfg.env),
        ),
        solution=_oracle(task_dir, cfg),
        services=services,
        metadata={
            "task_dir": str(task_dir),
            "config": cfg.raw,
            "agent_timeout": cfg.agent_timeout_of(first),
            "instructions": instructions,
            "setup_script": setup.read_text() if setup.is_file() and host else None,
            "healthcheck": cfg.healthcheck.command if cfg.healthcheck else None,
            "mcp_servers": [s.name for s in cfg.mcp_servers],
            "steps": [s.name for s in cfg.steps],
            "services": [s.name for s in services],
        },
    )


def tasks(
    root: str | Path = DATA,
    benchmark: str = "terminal-bench",
    verifier_mode: str | None = None,
    logs: str | Path | None = None,
) -> list[TbTask]:
    """Every task directory (one holding task.toml) under `root`, by name."""
    dirs = sorted(p.parent for p in Path(root).glob("*/task.toml"))
    if not dirs:
        raise NoData(f"no harbor tasks (*/task.toml) under {root}")
    return [load_task(d, benchmark, verifier_mode, logs) for d in dirs]
