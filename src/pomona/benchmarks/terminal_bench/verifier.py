"""harbor's verifier, in a sandbox the agent never ran in.

Where the tests run (per task, or per step of a multi-step task):
  - `separate` (a task asking for harbor's `verifier.environment_mode = "separate"`, or naming a
    `[verifier.environment]`): as harbor does it, a fresh sandbox of the verifier's environment
    (its image, whose tests are bundled, or the task's own environment rebuilt), on the
    verification's own network, into which the declared `artifacts` (and /logs/artifacts) are
    copied from the agent's state at their own paths.
  - `fork` (Pomona's default for every other task): a fork of the agent's snapshot. It holds all
    the agent's files, but no agent process survives, and the tests and the pytest they run come
    fresh. A fork keeps the agent sandbox's network, so a task whose verifier asks for another
    one must say `separate` (the task is refused at load otherwise).
  - `shared` only when asked for (TbScorer(mode="shared")): the agent's own sandbox.
Then, as harbor: `[[verifier.collect]]` commands run in the agent's sandbox first (best effort,
as harbor's), stale reward files are removed, tests/ (and a step's own tests/ over it) uploaded
to /tests, the test script run (as `[verifier].user`, root by default, with `[verifier].env`)
with its output in /logs/verifier/test-stdout.txt, and /logs/verifier/reward.json (a flat
{name: number} map) or reward.txt (one float) read. Neither file means the trial errored: a
`verifier` failure, excluded from scores rather than counted as 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shlex
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pomona.benchmarks.pytools import install_pytest
from pomona.benchmarks.task import Score, Task, VerifierError
from pomona.benchmarks.terminal_bench.config import (
    MAIN_SERVICE,
    Artifact,
    StepConfig,
    TbConfig,
    resolve_env,
)
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.orchestrator.types import SnapshotInfo

LOGS = "/logs/verifier"
ARTIFACTS = "/logs/artifacts"  # harbor's convention directory, always collected
MODES = ("fork", "separate", "shared")


if TYPE_CHECKING:  # both import this module
    from pomona.benchmarks.terminal_bench import TbTask
    from pomona.benchmarks.terminal_bench.services import ServiceGroup


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


def tar_of(*directories: Path) -> bytes:
    """The directories' files as one tar, a later directory's file winning over an earlier's (a
    step's tests over the task's)."""
    files: dict[str, Path] = {}
    for directory in directories:
        for path in sorted(directory.rglob("*")):
            files[str(path.relative_to(directory))] = path
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in sorted(files.items()):
            tar.add(path, arcname=name, recursive=False)
    return buf.getvalue()


def sanitized(tar_bytes: bytes, exclude: tuple[str, ...] = ()) -> bytes:
    """A copy of a tar keeping only what tarfile's `data` filter allows (no links out of the
    tree, no devices, no setuid bits) and nothing `exclude` names: an agent's files are input."""
    out = io.BytesIO()
    with (
        tempfile.TemporaryDirectory() as dest,
        tarfile.open(fileobj=io.BytesIO(tar_bytes)) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src:
            name = member.name.removeprefix("./")
            if any(Path(name).match(p) or name.startswith(p.rstrip("/") + "/") for p in exclude):
                continue
            try:
                clean = tarfile.data_filter(member, dest)
            except tarfile.FilterError:
                continue
            # the filter leaves what it drops unset (owner, directory and link modes): a tar
            # being written needs values, so the copy is owned by whoever unpacks it
            clean = clean.replace(
                uid=0,
                gid=0,
                uname="",
                gname="",
                deep=False,
                mode=0o755 if clean.mode is None else clean.mode,
            )
            dst.addfile(clean, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()


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


@dataclass(frozen=True)
class TbScorer:
    """harbor's verifier, in a sandbox of its own (see the module docstring for the modes)."""

    task_dir: Path
    config: TbConfig | None = None
    mode: str | None = None  # None: the task's own (separate if it asks, else fork)
    client: SandboxClient | None = None  # verifier sandboxes'; by default the agent sandbox's

    @property
    def timeout(self) -> float:
        return self.config.verifier.timeout if self.config else 600.0

    def resolved_mode(self, step: StepConfig | None = None) -> str:
        mode = self.mode or (
            "separate" if self.config and self.config.verifier_mode(step) == "separate" else "fork"
        )
        if mode not in MODES:
            raise ValueError(f"verifier mode must be one of {MODES}, not {mode!r}")
        return mode

    def check_network(self, agent_network: str, step: StepConfig | None = None) -> None:
        """Refuse, before anything runs, a verification whose network cannot be given: a fork
        keeps the agent sandbox's network, and only the model proxy beyond what was asked
        (a fork of a gateway sandbox for a verifier with no network) is let through."""
        if self.config is None or self.resolved_mode(step) == "separate":
            return
        wanted = self.config.verifier_phase(step, mode="shared").verifier_sandbox()
        if wanted != agent_network and (wanted, agent_network) != ("none", "gateway"):
            where = f" of step {step.name!r}" if step else ""
            raise ValueError(
                f"{self.task_dir}: the verifier{where} asks for network {wanted!r}, but it runs "
                f"in a fork of the agent's sandbox, which keeps the agent's {agent_network!r}; "
                'declare verifier.environment_mode = "separate" so it gets a sandbox of its own'
            )

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        from pomona.benchmarks.terminal_bench import TbTask  # which imports this module

        if not isinstance(task, TbTask):
            raise TypeError(f"TbScorer verifies Terminal-Bench tasks (TbTask), not {task!r}")
        return self.verify_phase(task, sandbox)

    def verify_phase(
        self, task: TbTask, sandbox: Sandbox, step: StepConfig | None = None
    ) -> dict[str, Any]:
        """Verify the agent's work as it stands in `sandbox` (after the task, or after `step`)."""
        collected = self._run_collect_hooks(task, sandbox, step)
        mode = self.resolved_mode(step)
        if mode == "shared":
            return {**self.verify(task, sandbox, step), "mode": mode, "collect": collected}
        client = self.client or sandbox._root
        with self.verifier_sandbox(task, sandbox, client, mode, step) as target:
            return {**self.verify(task, target, step), "mode": mode, "collect": collected}

    def _run_collect_hooks(
        self, task: TbTask, sandbox: Sandbox, step: StepConfig | None
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

    @contextlib.contextmanager
    def verifier_sandbox(
        self,
        task: TbTask,
        agent: Sandbox,
        client: SandboxClient,
        mode: str,
        step: StepConfig | None = None,
    ) -> Iterator[Sandbox]:
        snapshot: SnapshotInfo | None = None
        target: Sandbox | None = None
        try:
            if mode == "fork":
                snapshot = agent.snapshot()
                (target,) = client.fork(snapshot, 1, labels={"purpose": "tb-verify"})
                install_pytest(target, force=True)  # whatever the agent left, pytest comes fresh
                if services := task.services_of(agent):
                    services.attach(target, owner=False)  # the agent's sidecars, as they are
            else:
                target = self._fresh_environment(task, client, step)
                artifacts = self.config.artifacts if self.config else ()
                copy_artifacts(
                    agent,
                    target,
                    artifacts + (step.artifacts if step else ()),
                    task.services_of(agent),
                )
            yield target
        finally:
            with contextlib.suppress(Exception):
                if target is not None:
                    target.delete()
            with contextlib.suppress(Exception):
                if snapshot is not None:  # after the fork that stacks on it is gone
                    client.delete_snapshot(snapshot)

    def _fresh_environment(
        self, task: TbTask, client: SandboxClient, step: StepConfig | None
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
        self, task: Task, sandbox: Sandbox, step: StepConfig | None = None
    ) -> dict[str, Any]:
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
        env = resolve_env(verifier.env) if verifier else {}
        user = (verifier.user if verifier else None) or "root"
        script = tests[1] if tests else "/tests/test.sh"
        timeout = verifier.timeout if verifier else self.timeout
        result = sandbox.exec(
            f"chmod +x {script}; {script} > {LOGS}/test-stdout.txt 2>&1",
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
        }

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        rewards = parse_reward(artifacts["files"])
        reward = reward_of(rewards)
        return Score(
            reward=reward,
            resolved=reward == 1.0,
            details={
                "rewards": rewards,
                "test_stdout": artifacts["files"].get("test-stdout.txt", "")[-4000:],
                "test_exit_code": artifacts["exit_code"],
                "verifier_mode": artifacts.get("mode"),
                "verifier_network": artifacts.get("network"),
                "collect": artifacts.get("collect", []),
            },
        )
