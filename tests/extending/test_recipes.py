"""docs/extending.md, followed once per recipe: a toy harness, benchmark, runtime, upstream kind
and agent, each added through the public seam only (nothing of Pomona's own is edited), each
shown working end to end. A recipe that stops working fails here."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from pomona import SandboxClient, trajectories
from pomona.benchmarks import registry
from pomona.benchmarks.registry import Benchmark, Finished, LoadContext, Outputs
from pomona.benchmarks.stage import Played, Stage
from pomona.benchmarks.task import CommandScorer, Environment, Task, Turn
from pomona.episodes import rollout, run_episode
from pomona.episodes.agents import CliHarness, StageContext, sandbox_stage
from pomona.episodes.attempt import Attempt
from pomona.harnesses import payload
from pomona.harnesses.base import Harness, Launch, PypiInstall, RunContext
from pomona.harnesses.base import Outputs as RunOutputs
from pomona.harnesses.registry import register as register_harness
from pomona.orchestrator.runtimes import RuntimeKind, register_runtime
from pomona.orchestrator.runtimes.memory import Command, MemoryRuntime
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.upstream import Outcome, UpstreamCall, register_kind
from pomona.run import run_benchmark

HELLO = Task(
    "toy/hello",
    "Write hello to out.txt.",
    CommandScorer("cat out.txt", "hello"),
    solution=("echo hello > out.txt",),
    benchmark="toy",
)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with ProxyServer(ProxyConfig(trajectories=tmp_path_factory.mktemp("runs"))) as server:
        yield server


# -- a harness ----------------------------------------------------------------------------------

LOOP = r"""
import json, subprocess, sys, urllib.request
base, model, prompt = sys.argv[1:4]
tools = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}}]
messages = [{"role": "user", "content": prompt}]
for _ in range(20):
    body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
    request = urllib.request.Request(base + "/chat/completions", body,
                                     {"Content-Type": "application/json"})
    reply = json.load(urllib.request.urlopen(request))["choices"][0]["message"]
    messages.append(reply)
    if not reply.get("tool_calls"):
        print(json.dumps({"final": reply.get("content") or ""}))
        break
    for call in reply["tool_calls"]:
        command = json.loads(call["function"]["arguments"])["command"]
        done = subprocess.run(command, shell=True, capture_output=True, text=True)
        messages.append({"role": "tool", "tool_call_id": call["id"],
                         "content": done.stdout + done.stderr})
"""


class ToyLoop(Harness):
    """A 20-line agent loop on the payload's CPython (the `pomona-python` that Claw-Eval's native
    loop installs): ask the model, run its bash call, send the result, stop at a text reply."""

    name = "toy-loop"
    version = "1"
    dialects = ("chat",)
    install = PypiInstall((), script="")
    command = "pomona-python"

    def launch(self, ctx: RunContext) -> Launch:
        loop = f"{ctx.run_dir}/loop.py"
        return Launch(["pomona-python", loop, ctx.base_url, ctx.model, ctx.prompt],
                      files={loop: LOOP})  # fmt: skip

    def final_answer(self, out: RunOutputs) -> str | None:
        finals = [line["final"] for line in out.json_lines() if "final" in line]
        return finals[-1] if finals else None


def test_a_toy_harness_runs_through_the_payload_and_the_proxy(client: SandboxClient, proxy: Any) -> None:  # fmt: skip
    assert not payload.ensure(["claw-eval"])  # its CPython is what the toy loop runs on
    toy = register_harness(ToyLoop())
    with pytest.raises(ValueError, match="exists already"):
        register_harness(ToyLoop())
    record = run_episode(HELLO, CliHarness(toy, "oracle"), proxy=proxy, client=client)
    assert (record.failure_kind, record.resolved, record.harness) == ("none", True, "toy-loop")
    calls = [c for c in trajectories.read(proxy.trajectories, "calls").to_pylist()
             if c["episode"] == record.episode]  # fmt: skip
    assert len(calls) == 2 and {c["dialect"] for c in calls} == {"chat"}


# -- a benchmark --------------------------------------------------------------------------------


def test_a_toy_benchmark_runs_through_pomona_run(state_dir: str, tmp_path: Path) -> None:
    loaded: list[LoadContext] = []

    def load(ctx: LoadContext) -> list[Task]:
        loaded.append(ctx)
        return [HELLO]

    def finish(done: Finished) -> Outputs:
        return Outputs([f"toy: {sum(bool(r.resolved) for r in done.records)} greeted"])

    registry.register(Benchmark("toy", "a toy", load, agent="pi", takes_path=True, finish=finish))
    result = run_benchmark("toy:anywhere", state_dir=state_dir, trajectories=tmp_path / "runs",
                           progress=False)  # fmt: skip
    assert loaded[0].path == "anywhere" and loaded[0].run_id == result.run_id
    assert [r.resolved for r in result.records] == [True] and result.lines == ["toy: 1 greeted"]
    (row,) = trajectories.read(tmp_path / "runs", "episodes").to_pylist()
    assert (row["benchmark"], row["harness"], row["model"]) == ("toy", "pi", "oracle")
    with pytest.raises(ValueError, match="unknown benchmark 'toy'"):
        registry.get("toy")  # takes a path: the bare name is not a benchmark


# -- a runtime ----------------------------------------------------------------------------------


async def _echo(command: Command) -> int:
    await command.write(command.text.removeprefix("echo ") + "\n")
    return 0


def test_a_toy_runtime_serves_the_sdk() -> None:
    register_runtime(RuntimeKind("toy-memory", lambda state_dir, **options: MemoryRuntime(_echo)))
    with SandboxClient("toy-memory") as toy, toy.create_sandbox("anything", timeout=60) as sb:
        assert (
            sb.info.runtime == "memory" and sb.exec("echo from the toy").stdout == "from the toy\n"
        )
    with pytest.raises(ValueError, match="unknown runtime 'nope': choose local, .*toy-memory"):
        SandboxClient("nope")


# -- an upstream kind ---------------------------------------------------------------------------


class Echo:
    """Answers a chat call with its last user message, reversed."""

    def __init__(self, config: Any):
        self.config = config

    async def call(self, call: UpstreamCall) -> Outcome:
        text = call.body["messages"][-1]["content"][::-1]
        body = {"id": "echo-1", "object": "chat.completion", "created": 0, "model": call.route.name,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}]}  # fmt: skip
        return Outcome(200, json.dumps(body).encode(), upstream="echo")

    async def aclose(self) -> None:
        pass


def test_a_toy_upstream_kind_is_recorded(tmp_path: Path) -> None:
    register_kind("toy-echo", Echo)
    route = {"model_name": "mirror", "litellm_params": {"model": "openai/mirror"},
             "model_info": {"pomona": {"kind": "toy-echo"}}}  # fmt: skip
    config = ProxyConfig.from_model_list([route], trajectories=tmp_path)
    with ProxyServer(config) as server:
        ep = server.open_episode(model="mirror")
        reply = openai.OpenAI(base_url=ep["base_url"], api_key="x").chat.completions.create(
            model="mirror", messages=[{"role": "user", "content": "pomona"}]
        )
        server.close_episode(ep["key"])
    assert reply.choices[0].message.content == "anomop"
    (call,) = trajectories.read(tmp_path, "calls").to_pylist()
    assert (call["episode"], call["upstream"], call["status"]) == (ep["key"], "echo", "ok")


# -- an agent -----------------------------------------------------------------------------------


@dataclass
class GoldScript:
    """Plays a task by running its gold solution in the sandbox: no model at all."""

    name: str = "gold-script"
    version: str = "1"
    model: str = "none"

    def stage(self, task: Task, ctx: StageContext, attempt: int) -> Stage:
        return sandbox_stage(task, ctx)

    def play(self, attempt: Attempt, stage: Stage, turn: Turn, number: int) -> Played:
        attempt.open(self.model)
        assert stage.sandbox is not None and attempt.task.solution is not None
        for command in attempt.task.solution:
            stage.sandbox.exec(command, timeout=60)
        return Played("done", 0)


def test_a_toy_agent_plays_through_the_engine(client: SandboxClient, proxy: Any, state_dir: str) -> None:  # fmt: skip
    broken = Task("toy/broken", "x", HELLO.scorer, environment=Environment(image="no-such-image:1"))
    records = asyncio.run(
        rollout([HELLO, broken], GoldScript(), proxy=proxy, state_dir=state_dir, progress=False)
    )
    assert [(r.task, r.failure_kind, r.resolved, r.harness) for r in records] == [
        ("toy/hello", "none", True, "gold-script"),
        ("toy/broken", "sandbox", None, "gold-script"),
    ]
    rows = {r["episode"]: r for r in trajectories.read(proxy.trajectories, "episodes").to_pylist()}
    assert rows[records[1].episode]["failure_kind"] == "sandbox"  # the row, though nothing played
    assert rows[records[1].episode]["reward"] is None
