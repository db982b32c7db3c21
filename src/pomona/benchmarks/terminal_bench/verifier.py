"""harbor's verifier, in a sandbox the agent never ran in.

Where the tests run (per task, or per step of a multi-step task):
  - `separate`: as harbor does it, a fresh sandbox of the verifier's environment
    (its image, whose tests are bundled, or the task's own environment rebuilt), on the
    verification's own network, into which the declared `artifacts` (and /logs/artifacts) are
    copied from the agent's state at their own paths.
    Pomona's default for every task that does not ask for `shared`: a task that declares no
    artifacts has its working directory copied over (the agent's output, as Pomona reads
    harbor's format for the tasks written for its shared default).
  - `shared` only when a task asks for it (`environment_mode = "shared"`, or
    TbScorer(mode="shared")): the agent's own sandbox, reported as such.
Before the output arrives the witness is put into the fresh sandbox; the files the output
brought are read by the spoof rules (evidence.py), and the verdict weighs the reward file, those
findings and the witness's account of the test script's pytest runs.
Then, as harbor: `[[verifier.collect]]` commands run in the agent's sandbox first (best effort,
as harbor's), stale reward files are removed, tests/ (and a step's own tests/ over it) uploaded
to /tests, the test script run (as `[verifier].user`, root by default, with `[verifier].env`)
with its output in /logs/verifier/test-stdout.txt, and /logs/verifier/reward.json (a flat
{name: number} map) or reward.txt (one float) read. Neither file means the trial errored: a
`verifier` failure, excluded from scores rather than counted as 0.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pomona.benchmarks.pytools import install_pytest
from pomona.benchmarks.task import Environment, Score, Task, VerifierError
from pomona.benchmarks.terminal_bench import evidence
from pomona.benchmarks.terminal_bench.archives import sanitized, tar_of
from pomona.benchmarks.terminal_bench.config import (
    MAIN_SERVICE,
    Artifact,
    StepConfig,
    TbConfig,
    resolve_env,
)
from pomona.benchmarks.verification import record, witness
from pomona.benchmarks.verification.images import engine_digest, files_digest
from pomona.benchmarks.verification.integrity import judge
from pomona.benchmarks.verification.record import Verification
from pomona.benchmarks.verification.spoof import Finding
from pomona.errors import UsageError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient

LOGS = "/logs/verifier"
ARTIFACTS = "/logs/artifacts"  # harbor's convention directory, always collected
SEPARATE = "separate"
MODES = (SEPARATE, "shared")


if TYPE_CHECKING:
    from pomona.benchmarks.terminal_bench.services import ServiceGroup


@runtime_checkable
class Verifiable(Protocol):
    """What the verifier needs of a Terminal-Bench task (a TbTask, whose scorer this is): its
    environment, rebuilt in a fresh sandbox, and the agent's sidecars."""

    @property
    def id(self) -> str: ...

    @property
    def environment(self) -> Environment: ...

    def build(self, sandbox: Sandbox) -> None: ...

    def services_of(self, sandbox: Sandbox) -> ServiceGroup | None: ...


def parse_reward(files: dict[str, str]) -> dict[str, float]:
    """harbor's reward files: reward.json wins over reward.txt; a missing, empty or malformed
    one (non-numeric, non-finite) is the verifier's failure."""
    try:
        if "reward.json" in files:
            data = json.loads(files["reward.json"])
            if not isinstance(data, dict) or not data:
                raise VerifierError("reward.json is not a flat {name: number} map")
            if not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()
            ):
                raise VerifierError(f"reward.json holds a non-numeric reward: {data}")
            rewards = {str(k): float(v) for k, v in data.items()}
        elif "reward.txt" in files:
            rewards = {"reward": float(files["reward.txt"].strip())}
        else:
            raise VerifierError(
                "RewardFileNotFoundError: the verifier wrote no reward.json or reward.txt"
            )
    except (ValueError, TypeError) as e:
        raise VerifierError(f"unreadable reward file: {e}") from e
    if not all(math.isfinite(v) for v in rewards.values()):
        raise VerifierError(f"reward is not finite: {rewards}")
    return rewards


def reward_of(rewards: dict[str, float]) -> float:
    """One number for a reward map: its `reward` key, else the mean of its keys."""
    return rewards.get("reward", sum(rewards.values()) / len(rewards))


# --- moving files between sandboxes --------------------------------------------------------------


def read_text(sandbox: Sandbox, path: str) -> str | None:
    try:
        return sandbox.read_file(path).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a missing file is an answer here, not an error
        return None


def copy_artifacts(
    agent: Sandbox,
    target: Sandbox,
    artifacts: tuple[Artifact, ...],
    services: ServiceGroup | None = None,
) -> list[str]:
    """harbor's re-materialization: each artifact at its own path in the target (a directory
    replaced whole), plus the convention directory, from the agent's sandbox or the sidecar it
    names (`services`: the agent's ServiceGroup); missing ones are skipped. Returns what was
    copied."""
    copied = []
    for artifact in (*artifacts, Artifact(ARTIFACTS)):
        main = artifact.service == MAIN_SERVICE
        source = agent if main else _sidecar(services, artifact.service)
        path = shlex.quote(artifact.source)
        kind = source.exec(
            f"test -d {path} && echo d || (test -f {path} && echo f)", user="root", timeout=60
        ).stdout.strip()
        if kind == "d":
            data = sanitized(source.download_dir(artifact.source), artifact.exclude)
            target.exec(f"rm -rf {path} && mkdir -p {path}", user="root", timeout=60)
            target.upload_dir(artifact.source, data)
        elif kind == "f":
            parent = shlex.quote(str(Path(artifact.source).parent))
            target.exec(f"mkdir -p {parent}", user="root", timeout=60)
            target.write_file(artifact.source, source.read_file(artifact.source))
        else:
            continue
        copied.append(artifact.source)
    return copied


def _sidecar(services: ServiceGroup | None, name: str) -> Sandbox:
    """The sandbox of the sidecar service `name` (the task's loader checked that it has one)."""
    if services is None:
        raise VerifierError(f"no sidecar service {name!r}: the task has no services")
    return services.sandbox_of(name)


# --- the verifier --------------------------------------------------------------------------------


@dataclass
class _Fresh:
    """A verifier sandbox made ready: the witness in place, the output copied in and read."""

    target: Sandbox
    installed: witness.Installed | None = None
    spoof: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class TbScorer:
    """harbor's verifier, in a sandbox of its own (see the module docstring for the modes)."""

    task_dir: Path
    config: TbConfig | None = None
    mode: str | None = None  # None: the task's own (shared if it asks for it, else separate)
    client: SandboxClient | None = None  # verifier sandboxes'; by default the agent sandbox's
    root: str = "pomona-runs/terminal-bench"  # where each verification's evidence is written

    @property
    def timeout(self) -> float:
        return self.config.verifier.timeout if self.config else 600.0

    def resolved_mode(self, step: StepConfig | None = None) -> str:
        mode = self.mode or (
            "shared" if self.config and self.config.asks_shared(step) else SEPARATE
        )
        if mode not in MODES:
            raise UsageError(f"verifier mode must be one of {MODES}, not {mode!r}")
        return mode

    def check_network(self, agent_network: str, step: StepConfig | None = None) -> None:
        """Refuse, before anything runs, a shared verification whose network cannot be given:
        the agent's sandbox keeps its network, and only the model proxy beyond what was asked
        (a gateway sandbox for a verifier with no network) is let through."""
        if self.config is None or self.resolved_mode(step) == SEPARATE:
            return
        wanted = self.config.verifier_phase(step, mode="shared").verifier_sandbox()
        if wanted != agent_network and (wanted, agent_network) != ("none", "gateway"):
            where = f" of step {step.name!r}" if step else ""
            raise UsageError(
                f"{self.task_dir}: the verifier{where} asks for network {wanted!r}, but a "
                f"shared verifier runs in the agent's sandbox, which keeps the agent's "
                f'{agent_network!r}; drop environment_mode = "shared" so it gets a sandbox '
                "of its own"
            )

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        if not isinstance(task, Verifiable):
            raise UsageError(f"TbScorer verifies Terminal-Bench tasks (TbTask), not {task!r}")
        return self.verify_phase(task, sandbox)

    def verify_phase(
        self, task: Verifiable, sandbox: Sandbox, step: StepConfig | None = None
    ) -> dict[str, Any]:
        """Verify the agent's work as it stands in `sandbox` (after the task, or after `step`):
        the reward files, the verdict and where its evidence was written."""
        collected = self._run_collect_hooks(task, sandbox, step)
        mode = self.resolved_mode(step)
        if mode == "shared":
            done = self.verify(task, sandbox, step)
            return self._judged(task, done, None, [], mode, collected)
        client = self.client or sandbox._root
        with self.fresh_verifier(task, sandbox, client, step) as fresh:
            if fresh.spoof:
                done = {"files": {}, "exit_code": None, "timed_out": False, "network": None}
            else:
                env = fresh.installed.environment() if fresh.installed else {}
                done = self.verify(task, fresh.target, step, env)
                done["records"] = witness.collect(fresh.target) if fresh.installed else []
            return self._judged(task, done, fresh.installed, fresh.spoof, mode, collected)

    def _judged(
        self,
        task: Verifiable,
        done: dict[str, Any],
        installed: witness.Installed | None,
        spoof: list[Finding],
        mode: str,
        collected: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The verification's result with its verdict, its evidence written to a log dir."""
        records = done.pop("records", [])
        integrity = None
        if mode == SEPARATE and not spoof:
            integrity = judge(
                records,
                installed.sites if installed else [],
                installed.untrusted if installed else [],
            )
        rewards = {} if spoof else parse_reward(done["files"])
        reward = 0.0 if spoof else reward_of(rewards)
        verdict, reason = evidence.verdict(
            rewards, reward, integrity, spoof, evidence.exit_statuses(records)
        )
        v = Verification(
            verdict,
            reason,
            mode="fresh" if mode == SEPARATE else "shared",
            command=done.get("command"),
            environment=done.get("environment", {}),
            image=done.get("image"),
            image_digest=self._digest(done.get("image")),
            sandbox={"user": done.get("user"), "network": done.get("network")},
            spoof=spoof,
            integrity=integrity,
            witness=installed.to_dict() if installed else None,
            records=records,
        )
        log_dir = evidence.write(Path(self.root), task.id, v, done["files"])
        return {
            **done,
            "mode": mode,
            "collect": collected,
            "verdict": verdict,
            "verification": v.to_dict(),
            "log_dir": str(log_dir),
        }

    def _digest(self, image: str | None) -> str | None:
        """What the verifier's environment was: the engine's image id, or for the host image the
        digest of the task's environment/ files (what its set-up builds from)."""
        if image == "host":
            return files_digest(self.task_dir / "environment")
        return engine_digest(image) if image else None

    def _run_collect_hooks(
        self, task: Verifiable, sandbox: Sandbox, step: StepConfig | None
    ) -> list[dict[str, Any]]:
        """harbor's collect hooks: best effort, a failing one is noted and verification goes on."""
        out = []
        hooks = self.config.verifier_of(step).collect if self.config else ()
        for hook in hooks:
            main = hook.service == MAIN_SERVICE
            where = sandbox if main else _sidecar(task.services_of(sandbox), hook.service)
            done = where.exec(
                hook.command,
                cwd=task.environment.workdir if main else None,
                user=hook.user or "root",
                timeout=hook.timeout,
            )
            out.append(
                {
                    "command": hook.command,
                    "service": hook.service,
                    "exit_code": done.exit_code,
                    "timed_out": done.timed_out,
                }
            )
        return out

    def outputs(self, task: Verifiable, step: StepConfig | None) -> tuple[Artifact, ...]:
        """What the task's format names as the agent's output: its (and the step's) declared
        artifacts, else its whole working directory."""
        declared = (self.config.artifacts if self.config else ()) + (step.artifacts if step else ())
        return declared or (Artifact(task.environment.workdir),)

    @contextlib.contextmanager
    def fresh_verifier(
        self,
        task: Verifiable,
        agent: Sandbox,
        client: SandboxClient,
        step: StepConfig | None = None,
    ) -> Iterator[_Fresh]:
        """harbor's separate verifier: the verifier's environment built fresh, the witness put
        in, then only the agent's declared output copied in (and read by the spoof rules)."""
        target = self._fresh_environment(task, client, step)
        try:
            outputs = self.outputs(task, step)
            paths = [a.source for a in outputs if a.service == MAIN_SERVICE]
            fresh = _Fresh(target, witness.install(target, paths))
            before = evidence.scan(target, paths)
            copy_artifacts(agent, target, outputs, task.services_of(agent))
            fresh.spoof = evidence.spoofs(
                evidence.changes(target, before, evidence.scan(target, paths))
            )
            yield fresh
        finally:
            with contextlib.suppress(Exception):
                target.delete()

    @contextlib.contextmanager
    def verifier_sandbox(
        self,
        task: Verifiable,
        agent: Sandbox,
        client: SandboxClient,
        mode: str = SEPARATE,
        step: StepConfig | None = None,
    ) -> Iterator[Sandbox]:
        """The sandbox a verification of `mode` runs in (the agent's own when shared)."""
        if mode == "shared":
            yield agent
            return
        with self.fresh_verifier(task, agent, client, step) as fresh:
            yield fresh.target

    def _fresh_environment(
        self, task: Verifiable, client: SandboxClient, step: StepConfig | None
    ) -> Sandbox:
        """The verifier's own environment: its image, or the task's environment built anew."""
        cfg = self.config
        image = (cfg.verifier_of(step).image if cfg else None) or task.environment.image
        network = cfg.verifier_phase(step).verifier_sandbox() if cfg else "none"
        target = client.create_sandbox(
            image,
            network=network,
            workdir=task.environment.workdir,
            user=task.environment.user,
            timeout=self.timeout + 600,
            labels={"purpose": "tb-verify", "task": task.id[:63]},
        )
        try:
            if image == task.environment.image:
                task.build(target)
            else:
                install_pytest(target)
        except BaseException:
            target.delete()
            raise
        return target

    def _tests(self, step: StepConfig | None) -> tuple[list[Path], str] | None:
        """The directories uploaded to /tests and the script run there, as harbor resolves them;
        None when the verifier's image bundles its own tests."""
        if (
            self.config
            and self.config.verifier_of(step).image
            and self.resolved_mode(step) == "separate"
        ):
            return None
        dirs = [d for d in (self.task_dir / "tests",) if d.is_dir()]
        if step is not None:
            own = self.task_dir / "steps" / step.name / "tests"
            if own.is_dir():
                dirs.append(own)
                if (own / "test.sh").is_file():
                    return dirs, "/tests/test.sh"
        if not (self.task_dir / "tests" / "test.sh").is_file():
            where = f" for step {step.name!r}" if step else ""
            raise VerifierError(f"{self.task_dir}: no tests/test.sh{where}")
        return dirs, "/tests/test.sh"

    def verify(
        self,
        task: Verifiable,
        sandbox: Sandbox,
        step: StepConfig | None = None,
        witnessed: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """harbor's verification in `sandbox`; `witnessed`: the witness's variables, under the
        task's own (a task's PYTEST_ADDOPTS keeps the witness's options in front)."""
        tests = self._tests(step)
        clear = "rm -rf /tests && mkdir -p /tests && " if tests else ""
        prep = sandbox.exec(
            f"{clear}mkdir -p {LOGS} && rm -f {LOGS}/reward.txt "
            f"{LOGS}/reward.json && chmod 777 {LOGS}",
            user="root",
            timeout=60,
        )
        if prep.exit_code != 0:
            raise VerifierError(f"could not prepare /tests: {prep.stderr.strip()}")
        if tests:
            sandbox.upload_dir("/tests", tar_of(*tests[0]))
        verifier = self.config.verifier_of(step) if self.config else None
        own = resolve_env(verifier.env) if verifier else {}
        env = {**(witnessed or {}), **own}
        if witnessed and "PYTEST_ADDOPTS" in own and "PYTEST_ADDOPTS" in witnessed:
            env["PYTEST_ADDOPTS"] = f"{witnessed['PYTEST_ADDOPTS']} {own['PYTEST_ADDOPTS']}"
        user = (verifier.user if verifier else None) or "root"
        script = tests[1] if tests else "/tests/test.sh"
        timeout = verifier.timeout if verifier else self.timeout
        command = f"chmod +x {script}; {script} > {LOGS}/test-stdout.txt 2>&1"
        result = sandbox.exec(
            command,
            cwd=task.environment.workdir,
            user=user,
            env=env,
            timeout=timeout,
        )
        files = {
            name: text
            for name in ("reward.json", "reward.txt", "test-stdout.txt")
            if (text := read_text(sandbox, f"{LOGS}/{name}")) is not None
        }
        return {
            "files": files,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "network": str(sandbox.info.spec.network),
            "command": command,
            "environment": env,
            "user": user,
            "image": sandbox.info.spec.image,
        }

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        """The reward the test script wrote, unless the verdict is spoof or suspect (then 0)."""
        verdict = artifacts.get("verdict", record.UNRESOLVED)
        rewards = {} if verdict == record.SPOOF else parse_reward(artifacts["files"])
        reward = 0.0 if verdict in (record.SPOOF, record.SUSPECT) else reward_of(rewards)
        return Score(
            reward=reward,
            resolved=verdict == record.RESOLVED,
            details={
                "verdict": verdict,
                "verification": artifacts.get("verification"),
                "log_dir": artifacts.get("log_dir"),
                "rewards": rewards,
                "test_stdout": artifacts["files"].get("test-stdout.txt", "")[-4000:],
                "test_exit_code": artifacts["exit_code"],
                "verifier_mode": artifacts.get("mode"),
                "verifier_network": artifacts.get("network"),
                "collect": artifacts.get("collect", []),
            },
        )
