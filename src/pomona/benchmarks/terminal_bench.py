"""Terminal-Bench 2.0 tasks in harbor's layout, verified by harbor's reward contract, where the
agent cannot tamper with the verdict.

    <task>/instruction.md        the agent's input, verbatim
    <task>/task.toml             config (harbor's schema 1.x; see TbConfig for what is read)
    <task>/environment/          Dockerfile (harbor builds it), setup.sh (Pomona's offline tasks)
    <task>/tests/test.sh         the verifier, uploaded to /tests only after the agent has run
    <task>/solution/solve.sh     the oracle

Verification runs in a sandbox of its own, never in the agent's:
  - `separate` (a task asking for harbor's `verifier.environment_mode = "separate"`, or naming a
    `[verifier.environment]`): as harbor does it, a fresh sandbox of the verifier's environment
    (its image, or the task's own environment rebuilt), into which the declared `artifacts`
    (and /logs/artifacts) are copied from the agent's final state at their own paths.
  - `fork` (Pomona's default for every other task): a fork of the agent's final snapshot. It
    holds all the agent's files, but no agent process survives, and the tests and the pytest
    they run come fresh (pytest is unpacked anew over whatever the agent left).
  - `shared` only when asked for (TbScorer(mode="shared")): the old way, in the agent's sandbox.
Then, as harbor: stale reward files removed, tests/ uploaded to /tests, /tests/test.sh run (as
`[verifier].user`, root by default, with `[verifier].env`) with its output in
/logs/verifier/test-stdout.txt, and /logs/verifier/reward.json (a flat {name: number} map) or
reward.txt (one float) read. Neither file means the trial errored: a `verifier` failure,
excluded from scores rather than counted as 0. Before any of it, `[[verifier.collect]]` commands
run in the agent's sandbox (harbor runs them there too, to snapshot state into files).

Where a task names `[environment] docker_image`, it runs there (as root unless `[agent].user`
names another user). Pomona's local tasks instead set `[metadata] pomona_image = "host"`: they run
on the host image, `environment/setup.sh` builds their state in the workdir (their Dockerfile
runs the same script, so harbor agrees) and pytest is installed from Pomona's own environment,
so everything works offline. Not supported: multi-step tasks (`[[steps]]`, refused at load),
sidecar services (compose) and MCP servers (listed in the task's metadata, not started).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import re
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.pytools import install_pytest
from pomona.benchmarks.task import Environment, Score, Task, VerifierError

DATA = Path(__file__).parent / "data" / "terminal_bench"
LOGS = "/logs/verifier"
ARTIFACTS = "/logs/artifacts"  # harbor's convention directory, always collected
DEFAULT_WORKDIR = "/app"
MODES = ("fork", "separate", "shared")


def parse_reward(files: dict[str, str]) -> dict[str, float]:
    """harbor's reward files: reward.json wins over reward.txt; a missing, empty or malformed
    one (non-numeric, non-finite) is the verifier's failure."""
    try:
        if "reward.json" in files:
            data = json.loads(files["reward.json"])
            if not isinstance(data, dict) or not data:
                raise VerifierError("reward.json is not a flat {name: number} map")
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()):
                raise VerifierError(f"reward.json holds a non-numeric reward: {data}")
            rewards = {str(k): float(v) for k, v in data.items()}
        elif "reward.txt" in files:
            rewards = {"reward": float(files["reward.txt"].strip())}
        else:
            raise VerifierError("RewardFileNotFoundError: the verifier wrote no reward.json or "
                                "reward.txt")
    except (ValueError, TypeError) as e:
        raise VerifierError(f"unreadable reward file: {e}") from e
    if not all(math.isfinite(v) for v in rewards.values()):
        raise VerifierError(f"reward is not finite: {rewards}")
    return rewards


def resolve_env(env: dict[str, str]) -> dict[str, str]:
    """`${VAR}` and `${VAR:-default}` in task.toml env values, from Pomona's own environment."""
    def one(m: re.Match) -> str:
        name, _, default = m.group(1).partition(":-")
        if name in os.environ:
            return os.environ[name]
        if m.group(1).find(":-") >= 0:
            return default
        raise ValueError(f"task.toml needs the environment variable {name}, which is not set")
    return {k: re.sub(r"\$\{([^}]+)\}", one, str(v)) for k, v in env.items()}


# --- task.toml ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Artifact:
    source: str
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Collect:
    command: str
    timeout: float = 60.0
    user: str | None = None


@dataclass(frozen=True)
class TbConfig:
    """What Pomona reads of harbor's task.toml (schema 1.x)."""

    name: str | None
    image: str | None  # [metadata] pomona_image, else [environment] docker_image
    workdir: str
    agent_timeout: float
    agent_user: str | None
    verifier_timeout: float
    verifier_user: str | None
    verifier_env: dict[str, str]
    verifier_image: str | None  # [verifier.environment] docker_image
    verifier_network: str  # "none" or "full"
    mode: str  # "separate" when the task asks for it, else "fork"
    artifacts: tuple[Artifact, ...]
    collect: tuple[Collect, ...]
    healthcheck: str | None
    solution_env: dict[str, str]
    mcp_servers: tuple[str, ...]
    raw: dict[str, Any] = field(default_factory=dict)


def _network(section: dict[str, Any], baseline: str = "none") -> str:
    mode = section.get("network_mode")
    if mode is None and "allow_internet" in section:
        mode = "public" if section["allow_internet"] else "no-network"
    return {"public": "full", "no-network": "none", "allowlist": "none"}.get(mode or "", baseline)


def _user(value: Any) -> str | None:
    if value is None:
        return None
    return "root" if str(value).split(":")[0] in ("root", "0") else "pomona"


def read_config(task_dir: Path) -> TbConfig:
    path = task_dir / "task.toml"
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    if raw.get("steps"):
        raise ValueError(f"{path}: multi-step tasks ([[steps]]) are not supported by Pomona yet")
    meta, env, agent = raw.get("metadata", {}), raw.get("environment", {}), raw.get("agent", {})
    verifier = raw.get("verifier", {})
    venv = verifier.get("environment")
    mode = verifier.get("environment_mode") or ("separate" if venv is not None else None)
    if mode not in (None, "shared", "separate"):
        raise ValueError(f"{path}: verifier.environment_mode must be shared or separate, not {mode!r}")
    artifacts = []
    for entry in raw.get("artifacts", []):
        entry = {"source": entry} if isinstance(entry, str) else entry
        if entry.get("service") not in (None, "main"):
            raise ValueError(f"{path}: artifacts from sidecar services are not supported")
        artifacts.append(Artifact(entry["source"], tuple(entry.get("exclude", ()))))
    collect = []
    for hook in verifier.get("collect", []):
        if hook.get("service", "main") != "main":
            raise ValueError(f"{path}: collect hooks in sidecar services are not supported")
        collect.append(Collect(hook["command"], float(hook.get("timeout_sec", 60)),
                               _user(hook.get("user"))))
    health = env.get("healthcheck")
    return TbConfig(
        name=(raw.get("task") or {}).get("name"),
        image=meta.get("pomona_image") or env.get("docker_image"),
        workdir=meta.get("pomona_workdir") or env.get("workdir") or DEFAULT_WORKDIR,
        agent_timeout=float(agent.get("timeout_sec") or 900), agent_user=_user(agent.get("user")),
        verifier_timeout=float(verifier.get("timeout_sec") or 600),
        verifier_user=_user(verifier.get("user")), verifier_env=dict(verifier.get("env", {})),
        verifier_image=(venv or {}).get("docker_image"),
        verifier_network=_network(verifier, _network(venv or env)),
        mode="separate" if mode == "separate" else "fork",
        artifacts=tuple(artifacts), collect=tuple(collect),
        healthcheck=health.get("command") if isinstance(health, dict) else None,
        solution_env=dict((raw.get("solution") or {}).get("env", {})),
        mcp_servers=tuple(s.get("name", "?") for s in env.get("mcp_servers", [])), raw=raw)


# --- moving files between sandboxes --------------------------------------------------------------


def _tar(directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return buf.getvalue()


def sanitized(tar_bytes: bytes, exclude: tuple[str, ...] = ()) -> bytes:
    """A copy of a tar keeping only what tarfile's `data` filter allows (no links out of the
    tree, no devices, no setuid bits) and nothing `exclude` names: an agent's files are input."""
    out = io.BytesIO()
    with tempfile.TemporaryDirectory() as dest, tarfile.open(fileobj=io.BytesIO(tar_bytes)) as src, \
            tarfile.open(fileobj=out, mode="w") as dst:
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
            clean = clean.replace(uid=0, gid=0, uname="", gname="", deep=False,
                                  mode=0o755 if clean.mode is None else clean.mode)
            dst.addfile(clean, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def _read(sandbox: Any, path: str) -> str | None:
    try:
        return sandbox.read_file(path).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a missing file is an answer here, not an error
        return None


def copy_artifacts(source: Any, target: Any, artifacts: tuple[Artifact, ...]) -> list[str]:
    """harbor's re-materialization: each artifact at its own path in the target (a directory
    replaced whole), plus the convention directory; missing ones are skipped. Returns what was
    copied."""
    copied = []
    for artifact in (*artifacts, Artifact(ARTIFACTS)):
        path = artifact.source
        kind = source.exec(f"test -d {_q(path)} && echo d || (test -f {_q(path)} && echo f)",
                           user="root", timeout=60).stdout.strip()
        if kind == "d":
            data = sanitized(source.download_dir(path), artifact.exclude)
            target.exec(f"rm -rf {_q(path)} && mkdir -p {_q(path)}", user="root", timeout=60)
            target.upload_dir(path, data)
        elif kind == "f":
            target.exec(f"mkdir -p {_q(str(Path(path).parent))}", user="root", timeout=60)
            target.write_file(path, source.read_file(path))
        else:
            continue
        copied.append(path)
    return copied


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)


# --- the verifier ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TbScorer:
    """harbor's verifier, in a sandbox of its own (see the module docstring for the modes)."""

    task_dir: Path
    config: TbConfig | None = None
    mode: str | None = None  # None: the task's own (separate if it asks, else fork)
    client: Any = None  # verifier sandboxes' client; by default the agent sandbox's own

    @property
    def timeout(self) -> float:
        return self.config.verifier_timeout if self.config else 600.0

    def resolved_mode(self) -> str:
        mode = self.mode or (self.config.mode if self.config else "fork")
        if mode not in MODES:
            raise ValueError(f"verifier mode must be one of {MODES}, not {mode!r}")
        return mode

    def collect(self, task: Task, sandbox: Any) -> dict[str, Any]:
        for hook in self.config.collect if self.config else ():
            done = sandbox.exec(hook.command, cwd=task.environment.workdir, user=hook.user or "root",
                                timeout=hook.timeout)
            if done.exit_code != 0:
                raise VerifierError(f"collect command {hook.command!r} failed: {done.stderr.strip()}")
        mode = self.resolved_mode()
        if mode == "shared":
            return {**self.verify(task, sandbox), "mode": mode}
        client = self.client or getattr(sandbox, "_root", None)
        if client is None:
            raise VerifierError("no sandbox client to verify with: pass TbScorer(client=...)")
        with self._verifier_sandbox(task, sandbox, client, mode) as target:
            return {**self.verify(task, target), "mode": mode}

    @contextlib.contextmanager
    def _verifier_sandbox(self, task: Task, agent: Any, client: Any, mode: str):
        snapshot, target = None, None
        try:
            if mode == "fork":
                snapshot = agent.snapshot()
                (target,) = client.fork(snapshot, 1, labels={"purpose": "tb-verify"})
                install_pytest(target, force=True)  # whatever the agent left, pytest comes fresh
            else:
                target = self._fresh_environment(task, client)
                copy_artifacts(agent, target, self.config.artifacts if self.config else ())
            yield target
        finally:
            with contextlib.suppress(Exception):
                if target is not None:
                    target.delete()
            with contextlib.suppress(Exception):
                if snapshot is not None:  # after the fork that stacks on it is gone
                    client.delete_snapshot(snapshot)

    def _fresh_environment(self, task: Task, client: Any) -> Any:
        """The verifier's own environment: its image, or the task's environment built anew."""
        cfg = self.config
        image = (cfg.verifier_image if cfg else None) or task.environment.image
        target = client.create_sandbox(image, network=cfg.verifier_network if cfg else "none",
                                       workdir=task.environment.workdir,
                                       user=task.environment.user, timeout=self.timeout + 600,
                                       labels={"purpose": "tb-verify", "task": task.id[:63]})
        try:
            if image == task.environment.image:
                task.prepare(target)
            else:
                install_pytest(target)
        except BaseException:
            target.delete()
            raise
        return target

    def verify(self, task: Task, sandbox: Any) -> dict[str, Any]:
        prep = sandbox.exec(f"rm -rf /tests && mkdir -p /tests {LOGS} && rm -f {LOGS}/reward.txt "
                            f"{LOGS}/reward.json && chmod 777 {LOGS}", user="root", timeout=60)
        if prep.exit_code != 0:
            raise VerifierError(f"could not prepare /tests: {prep.stderr.strip()}")
        sandbox.upload_dir("/tests", _tar(self.task_dir / "tests"))
        env = resolve_env(self.config.verifier_env) if self.config else {}
        user = (self.config.verifier_user if self.config else None) or "root"
        result = sandbox.exec(f"chmod +x /tests/test.sh; /tests/test.sh > {LOGS}/test-stdout.txt 2>&1",
                              cwd=task.environment.workdir, user=user, env=env,
                              timeout=self.timeout)
        files = {name: text for name in ("reward.json", "reward.txt", "test-stdout.txt")
                 if (text := _read(sandbox, f"{LOGS}/{name}")) is not None}
        return {"files": files, "exit_code": result.exit_code, "timed_out": result.timed_out}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        rewards = parse_reward(artifacts["files"])
        reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
        return Score(reward=reward, resolved=reward == 1.0, details={
            "rewards": rewards, "test_stdout": artifacts["files"].get("test-stdout.txt", "")[-4000:],
            "test_exit_code": artifacts["exit_code"], "verifier_mode": artifacts.get("mode")})


# --- tasks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TbTask(Task):
    """A harbor task; with a setup script, prepare() builds its state offline."""

    def prepare(self, sandbox: Any) -> None:
        setup = self.metadata.get("setup_script")
        if setup is not None:
            sandbox.write_file("/tmp/pomona-setup.sh", setup)
            result = sandbox.exec("bash /tmp/pomona-setup.sh && rm -f /tmp/pomona-setup.sh",
                                  cwd=self.environment.workdir, timeout=600)
            if result.exit_code != 0:
                raise RuntimeError(f"task {self.id}: environment setup failed: {result.stderr.strip()}")
            install_pytest(sandbox)
        health = self.metadata.get("healthcheck")
        if health and sandbox.exec(health, cwd=self.environment.workdir, timeout=60).exit_code != 0:
            raise RuntimeError(f"task {self.id}: the environment's healthcheck failed: {health}")


def solve_commands(solve_sh: str, env: dict[str, str] | None = None) -> list[str]:
    """The oracle's script: solve.sh written to /tmp/solution and run, as one shell command."""
    data = base64.b64encode(solve_sh.encode()).decode()
    exports = "".join(f"export {k}={_q(v)} && " for k, v in (env or {}).items())
    return [f"{exports}mkdir -p /tmp/solution && echo {data} | base64 -d > /tmp/solution/solve.sh && "
            "bash /tmp/solution/solve.sh"]


def load_task(task_dir: str | Path, benchmark: str = "terminal-bench",
              verifier_mode: str | None = None) -> TbTask:
    task_dir = Path(task_dir)
    cfg = read_config(task_dir)
    if not cfg.image:
        raise ValueError(f"{task_dir}: no prebuilt image; Pomona does not build Dockerfiles: set "
                         "[environment] docker_image (or [metadata] pomona_image)")
    setup = task_dir / "environment" / "setup.sh"
    solve = task_dir / "solution" / "solve.sh"
    host = cfg.image == "host"
    user = cfg.agent_user or ("pomona" if host else "root")
    return TbTask(
        id=cfg.name or f"{benchmark}/{task_dir.name}", benchmark=benchmark,
        instruction=(task_dir / "instruction.md").read_text(),
        scorer=TbScorer(task_dir, cfg, verifier_mode),
        environment=Environment(image=cfg.image, workdir=cfg.workdir, user=user),
        solution=(tuple(solve_commands(solve.read_text(), resolve_env(cfg.solution_env)))
                  if solve.is_file() else None),
        metadata={"task_dir": str(task_dir), "config": cfg.raw, "agent_timeout": cfg.agent_timeout,
                  "setup_script": setup.read_text() if setup.is_file() and host else None,
                  "healthcheck": cfg.healthcheck, "mcp_servers": list(cfg.mcp_servers)})


def tasks(root: str | Path = DATA, benchmark: str = "terminal-bench",
          verifier_mode: str | None = None) -> list[TbTask]:
    """Every task directory (one holding task.toml) under `root`, by name."""
    dirs = sorted(p.parent for p in Path(root).glob("*/task.toml"))
    if not dirs:
        raise FileNotFoundError(f"no harbor tasks (*/task.toml) under {root}")
    return [load_task(d, benchmark, verifier_mode) for d in dirs]
