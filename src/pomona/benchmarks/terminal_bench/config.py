"""harbor's task.toml (schema 1.x, up to 1.4 as harbor 0.26 writes it), read into what Pomona
acts on, with harbor's own rules for what inherits from what.

    [task] [metadata] [solution] env   names, free-form metadata, the oracle's environment
    [environment]    docker_image, workdir, env, healthcheck, network_mode / allowed_hosts
                     (or the legacy allow_internet), [[environment.mcp_servers]]
    [agent]          timeout_sec, user, network_mode (a phase override)
    [verifier]       timeout_sec, user, env, environment_mode, [verifier.environment],
                     network_mode, [[verifier.collect]]
    artifacts        what a separate verifier gets from the agent's final state
    [[steps]]        multi-step tasks: each with its own [steps.agent], [steps.verifier],
                     min_reward, healthcheck and artifacts; multi_step_reward_strategy

Network policies follow harbor's trial plan (harbor/trial/network_policy.py): the agent phase
is the step's explicit policy, else the task's `[agent]` one, else the environment's baseline;
the verifier phase likewise over `[verifier]`, its baseline being the verifier environment's
(separate) or the agent environment's (shared). A baseline left unset is `public`, as in harbor.
What cannot work in Pomona is refused here, with the reason, before anything starts.
"""

from __future__ import annotations

import math
import os
import re
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from pomona.benchmarks.task import TaskSetupFailed
from pomona.errors import UsageError
from pomona.harnesses.mcp import McpServer
from pomona.orchestrator.sdk.client import Sandbox

DEFAULT_WORKDIR = "/app"
MAIN_SERVICE = "main"
_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def resolve_env(env: dict[str, str]) -> dict[str, str]:
    """`${VAR}` and `${VAR:-default}` in task.toml values, from Pomona's own environment."""

    def one(m: re.Match) -> str:
        name, sep, default = m.group(1).partition(":-")
        if name in os.environ:
            return os.environ[name]
        if sep:
            return default
        raise UsageError(f"task.toml needs the environment variable {name}, which is not set")

    return {k: re.sub(r"\$\{([^}]+)\}", one, str(v)) for k, v in env.items()}


# --- the parts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Network:
    """A harbor network policy: `public`, `no-network` or `allowlist` (with its hosts)."""

    mode: str
    hosts: tuple[str, ...] = ()

    def agent_sandbox(self) -> str:
        """The sandbox network an agent gets: it always reaches the model proxy (harbor adds the
        inference host to every restricted policy), and the internet only when public."""
        return "full" if self.mode == "public" else "gateway"

    def verifier_sandbox(self) -> str:
        return "full" if self.mode == "public" else "none"


PUBLIC = Network("public")


@dataclass(frozen=True)
class Artifact:
    source: str
    exclude: tuple[str, ...] = ()
    service: str = MAIN_SERVICE  # the compose service whose files it is


@dataclass(frozen=True)
class Collect:
    command: str
    timeout: float = 60.0
    user: str | None = None
    service: str = MAIN_SERVICE  # where it runs


@dataclass(frozen=True)
class Healthcheck:
    """Docker HEALTHCHECK's options, as harbor runs them (terminal_bench.run_healthcheck)."""

    command: str
    interval: float = 5.0
    timeout: float = 30.0
    start_period: float = 0.0
    start_interval: float = 5.0
    retries: int = 3

    def wait(self, sandbox: Sandbox, workdir: str, what: str) -> None:
        """Run the check until it passes: failures in the start period do not count, `retries`
        in a row after it fail `what`."""
        start_end = time.monotonic() + self.start_period
        failures = 0
        while True:
            in_start = time.monotonic() < start_end
            if sandbox.exec(self.command, cwd=workdir, timeout=self.timeout).exit_code == 0:
                return
            if not in_start:
                failures += 1
                if failures >= self.retries:
                    raise TaskSetupFailed(
                        f"{what}: the healthcheck failed {failures} times in a row: {self.command}"
                    )
            time.sleep(self.start_interval if in_start else self.interval)


@dataclass(frozen=True)
class VerifierConfig:
    timeout: float = 600.0
    user: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    mode: str | None = (
        None  # "shared", "separate", or None (inherit; a named environment: separate)
    )
    image: str | None = None  # [verifier.environment] docker_image: tests bundled in it
    has_environment: bool = False  # a [verifier.environment] table is there
    baseline: Network | None = None  # the verifier environment's own network
    network: Network | None = None  # the verification phase's explicit policy
    collect: tuple[Collect, ...] = ()


@dataclass(frozen=True)
class StepConfig:
    """One `[[steps]]` entry: its files live under steps/<name>/ (instruction.md, workdir/
    with an optional setup.sh, tests/, solution/)."""

    name: str
    agent_timeout: float | None = None
    agent_user: str | None = None
    agent_network: Network | None = None
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None
    artifacts: tuple[Artifact, ...] = ()


@dataclass(frozen=True)
class TbConfig:
    """What Pomona reads of one task.toml, and harbor's inheritance rules over it."""

    name: str | None
    image: str | None  # [metadata] pomona_image, else [environment] docker_image
    workdir: str
    env: dict[str, str]  # [environment] env, unresolved
    baseline: Network  # the agent environment's network
    agent_timeout: float
    agent_user: str | None
    agent_network: Network | None
    verifier: VerifierConfig
    artifacts: tuple[Artifact, ...]
    healthcheck: Healthcheck | None
    solution_env: dict[str, str]
    mcp_servers: tuple[McpServer, ...]
    steps: tuple[StepConfig, ...] = ()
    reward_strategy: str = "mean"  # multi-step: "mean" per key over verified steps, or "final"
    raw: dict[str, Any] = field(default_factory=dict)

    # harbor/models/task/verifier_mode.py and harbor/trial/network_policy.py, in Pomona's terms
    def verifier_of(self, step: StepConfig | None) -> VerifierConfig:
        """The effective verifier settings of a step: the step's own where it sets them."""
        if step is None:
            return self.verifier
        own, task = step.verifier, self.verifier
        return VerifierConfig(
            timeout=own.timeout,
            user=own.user if own.user is not None else task.user,
            env={**task.env, **own.env},
            mode=own.mode,
            image=own.image or task.image,
            has_environment=own.has_environment or task.has_environment,
            baseline=own.baseline if own.has_environment else task.baseline,
            network=own.network or task.network,
            collect=task.collect + own.collect,
        )

    def verifier_mode(self, step: StepConfig | None = None) -> str:
        """harbor's: explicit step mode > a step environment > the task's mode > a task
        environment > shared."""
        for v in ((step.verifier,) if step else ()) + (self.verifier,):
            if v.mode is not None:
                return v.mode
            if v.has_environment:
                return "separate"
        return "shared"

    def asks_shared(self, step: StepConfig | None = None) -> bool:
        """Whether the task (or the step) asks, in so many words, to be verified in the agent's
        own environment; harbor's default, shared, is not taken as asking."""
        for v in ((step.verifier,) if step else ()) + (self.verifier,):
            if v.mode is not None:
                return v.mode == "shared"
            if v.has_environment:
                return False
        return False

    def agent_phase(self, step: StepConfig | None = None) -> Network:
        return (step.agent_network if step else None) or self.agent_network or self.baseline

    def verifier_phase(self, step: StepConfig | None = None, mode: str = "separate") -> Network:
        """The verification's network: an explicit phase policy, else the baseline of the
        environment it runs in (the verifier's own when separate, the agent's otherwise)."""
        v = self.verifier_of(step)
        if v.network is not None:
            return v.network
        if mode == "separate" and v.has_environment:
            return v.baseline or PUBLIC
        return self.baseline

    def agent_timeout_of(self, step: StepConfig | None) -> float:
        return (step.agent_timeout if step else None) or self.agent_timeout


# --- reading -------------------------------------------------------------------------------------


class _Reader:
    """Reads one task.toml, every error naming the file and the field."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, message: str) -> UsageError:
        return UsageError(f"{self.path}: {message}")

    def table(self, parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{where}{key} must be a table")
        return value

    @overload
    def number(self, value: Any, where: str, default: float) -> float: ...
    @overload
    def number(self, value: Any, where: str, default: None) -> float | None: ...
    def number(self, value: Any, where: str, default: float | None) -> float | None:
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise self.fail(f"{where} must be a positive number, not {value!r}")
        return float(value)

    def user(self, value: Any) -> str | None:
        """A sandbox has two users: root (root or uid 0, as harbor writes them) and pomona."""
        if value is None:
            return None
        return "root" if str(value).split(":")[0] in ("root", "0") else "pomona"

    def network(self, section: dict[str, Any], where: str, legacy: bool = False) -> Network | None:
        mode = section.get("network_mode")
        hosts = section.get("allowed_hosts")
        if mode is None and legacy and section.get("allow_internet") is not None and hosts is None:
            mode = "public" if section["allow_internet"] else "no-network"
        if mode is None:
            if hosts is not None:
                raise self.fail(
                    f"{where}allowed_hosts is only valid with network_mode = 'allowlist'"
                )
            return None
        if mode not in ("public", "no-network", "allowlist"):
            raise self.fail(
                f"{where}network_mode must be public, no-network or allowlist, not {mode!r}"
            )
        if mode != "allowlist" and hosts:
            raise self.fail(f"{where}allowed_hosts is only valid with network_mode = 'allowlist'")
        if mode == "allowlist":
            raise self.fail(
                f"{where}network_mode = 'allowlist' ({', '.join(hosts or []) or 'no hosts'}): no "
                "Pomona runtime enforces a host allow-list (their modes are none, the model proxy "
                "only, or the whole network), so the policy cannot be honoured as written"
            )
        return Network(mode)

    def artifacts(self, entries: Any, where: str) -> tuple[Artifact, ...]:
        out = []
        for i, entry in enumerate(entries or []):
            entry = {"source": entry} if isinstance(entry, str) else entry
            if not isinstance(entry, dict) or not isinstance(entry.get("source"), str):
                raise self.fail(f"{where}artifacts[{i}] needs a source path")
            if ".." in Path(entry["source"]).parts:
                raise self.fail(f"{where}artifacts[{i}]: a source must not contain '..'")
            service = entry.get("service") or MAIN_SERVICE
            if service != MAIN_SERVICE and not entry["source"].startswith("/"):
                raise self.fail(
                    f"{where}artifacts[{i}]: a sidecar's artifact needs an absolute source path"
                )
            out.append(Artifact(entry["source"], tuple(entry.get("exclude", ())), service))
        return tuple(out)

    def healthcheck(self, value: Any, where: str) -> Healthcheck | None:
        if value is None:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("command"), str):
            raise self.fail(f"{where}healthcheck needs a command")
        retries = value.get("retries", 3)
        if not isinstance(retries, int) or retries < 1:
            raise self.fail(f"{where}healthcheck.retries must be a positive integer")
        opt: dict[str, float] = {
            k: self.number(value.get(f"{k}_sec"), f"{where}healthcheck.{k}_sec", d)
            for k, d in (("interval", 5.0), ("timeout", 30.0), ("start_interval", 5.0))
        }
        start = value.get("start_period_sec", 0.0)
        if not isinstance(start, int | float) or start < 0:
            raise self.fail(f"{where}healthcheck.start_period_sec must be >= 0")
        return Healthcheck(value["command"], start_period=float(start), retries=retries, **opt)

    def verifier(self, section: dict[str, Any], where: str) -> VerifierConfig:
        env_table = section.get("environment")
        if env_table is not None and not isinstance(env_table, dict):
            raise self.fail(f"{where}verifier.environment must be a table")
        mode = section.get("environment_mode")
        if mode not in (None, "shared", "separate"):
            raise self.fail(
                f"{where}verifier.environment_mode must be shared or separate, not {mode!r}"
            )
        if mode == "shared" and env_table is not None:
            raise self.fail(
                f"{where}verifier.environment_mode = 'shared' conflicts with a "
                "[verifier.environment]"
            )
        collect = []
        for i, hook in enumerate(section.get("collect", [])):
            if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
                raise self.fail(f"{where}verifier.collect[{i}] needs a command")
            collect.append(
                Collect(
                    hook["command"],
                    self.number(
                        hook.get("timeout_sec"), f"{where}verifier.collect[{i}].timeout_sec", 60.0
                    ),
                    self.user(hook.get("user")),
                    hook.get("service") or MAIN_SERVICE,
                )
            )
        env = section.get("env", {})
        if not isinstance(env, dict):
            raise self.fail(f"{where}verifier.env must be a table")
        return VerifierConfig(
            timeout=self.number(section.get("timeout_sec"), f"{where}verifier.timeout_sec", 600.0),
            user=self.user(section.get("user")),
            env={str(k): str(v) for k, v in env.items()},
            mode=mode,
            image=(env_table or {}).get("docker_image"),
            has_environment=env_table is not None,
            baseline=(
                self.network(env_table, f"{where}verifier.environment.", legacy=True) or PUBLIC
            )
            if env_table is not None
            else None,
            network=self.network(section, f"{where}verifier."),
            collect=tuple(collect),
        )

    def mcp_servers(self, entries: Any) -> tuple[McpServer, ...]:
        """[[environment.mcp_servers]] as Pomona's McpServer: stdio (command + args) or
        Streamable HTTP (url + headers, whose ${VAR}s come from Pomona's environment)."""
        servers = []
        for i, s in enumerate(entries or []):
            where = f"environment.mcp_servers[{i}]"
            if not isinstance(s, dict) or not isinstance(s.get("name"), str):
                raise self.fail(f"{where} needs a name")
            transport = s.get("transport", "sse")
            if transport == "http":
                transport = "streamable-http"
            try:
                if transport == "stdio":
                    if not s.get("command"):
                        raise UsageError("'command' is required for transport 'stdio'")
                    servers.append(
                        McpServer(s["name"], command=(s["command"], *map(str, s.get("args", ()))))
                    )
                elif transport == "streamable-http":
                    if not s.get("url"):
                        raise UsageError("'url' is required for transport 'streamable-http'")
                    servers.append(
                        McpServer(
                            s["name"], url=s["url"], headers=resolve_env(s.get("headers", {}))
                        )
                    )
                elif transport == "sse":
                    raise UsageError(
                        "transport 'sse' (harbor's default when none is named): "
                        "Pomona gives harnesses stdio and Streamable HTTP servers "
                        'only; say transport = "streamable-http" if the server '
                        "speaks it"
                    )
                else:
                    raise UsageError(f"unknown transport {transport!r}")
            except UsageError as e:
                raise self.fail(f"{where}: {e}") from None
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise self.fail("environment.mcp_servers: names must be unique")
        return tuple(servers)

    def step(self, raw: dict[str, Any], i: int) -> StepConfig:
        where = f"steps[{i}]."
        name = raw.get("name")
        if not isinstance(name, str) or not _STEP_NAME.match(name):
            raise self.fail(
                f"{where}name must be a portable directory name (letters, digits, "
                f". _ -), not {name!r}"
            )
        agent = self.table(raw, "agent", where)
        min_reward = raw.get("min_reward")
        if isinstance(min_reward, dict):
            min_reward = {str(k): float(v) for k, v in min_reward.items()}
        elif min_reward is not None:
            min_reward = float(min_reward)
        return StepConfig(
            name=name,
            agent_timeout=self.number(agent.get("timeout_sec"), f"{where}agent.timeout_sec", None),
            agent_user=self.user(agent.get("user")),
            agent_network=self.network(agent, f"{where}agent."),
            verifier=self.verifier(self.table(raw, "verifier", where), where),
            min_reward=min_reward,
            healthcheck=self.healthcheck(raw.get("healthcheck"), where),
            artifacts=self.artifacts(raw.get("artifacts"), where),
        )


def read_config(task_dir: Path) -> TbConfig:
    path = Path(task_dir) / "task.toml"
    r = _Reader(path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise r.fail(f"not valid TOML: {e}") from None
    meta, env = r.table(raw, "metadata", ""), r.table(raw, "environment", "")
    agent, verifier = r.table(raw, "agent", ""), r.table(raw, "verifier", "")
    if str(env.get("os", "linux")).lower() != "linux":
        raise r.fail(f"environment.os = {env['os']!r}: Pomona's sandboxes run Linux only")
    if env.get("gpus") or env.get("tpu"):
        raise r.fail("the task asks for GPUs or TPUs, which Pomona's sandboxes do not provide")
    steps = tuple(r.step(s, i) for i, s in enumerate(raw.get("steps") or []))
    if len({s.name.casefold() for s in steps}) != len(steps):
        raise r.fail("step names must be unique")
    strategy = raw.get("multi_step_reward_strategy") or "mean"
    if strategy not in ("mean", "final"):
        raise r.fail(f"multi_step_reward_strategy must be mean or final, not {strategy!r}")
    environment_env = env.get("env", {})
    if not isinstance(environment_env, dict):
        raise r.fail("environment.env must be a table")
    return TbConfig(
        name=r.table(raw, "task", "").get("name"),
        image=meta.get("pomona_image") or env.get("docker_image"),
        workdir=meta.get("pomona_workdir") or env.get("workdir") or DEFAULT_WORKDIR,
        env={str(k): str(v) for k, v in environment_env.items()},
        baseline=r.network(env, "environment.", legacy=True) or PUBLIC,
        agent_timeout=r.number(agent.get("timeout_sec"), "agent.timeout_sec", 900.0),
        agent_user=r.user(agent.get("user")),
        agent_network=r.network(agent, "agent."),
        verifier=r.verifier(verifier, ""),
        artifacts=r.artifacts(raw.get("artifacts"), ""),
        healthcheck=r.healthcheck(env.get("healthcheck"), "environment."),
        solution_env={
            str(k): str(v) for k, v in r.table(raw, "solution", "").get("env", {}).items()
        },
        mcp_servers=r.mcp_servers(env.get("mcp_servers")),
        steps=steps,
        reward_strategy=strategy,
        raw=raw,
    )
