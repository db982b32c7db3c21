"""The `transformers` upstream: a local causal LM served as an OpenAI Chat endpoint that answers
with token ids and logprobs in the fields vLLM uses, so episodes give token-level data on a CPU.

    model_list:
      - model_name: tiny
        litellm_params: {model: transformers//path/to/hf-model-dir, temperature: 0, max_tokens: 96}

The proxy starts one in-process server per route the first time it is used (routes to one
directory share the weights) and reaches it like any vLLM upstream (same-dialect pass-through;
other dialects through LiteLLM). The route's `temperature` and `max_tokens` are the defaults for
requests that name none, and `max_tokens` caps every reply (see LocalModel).
Standalone: `LocalModelServer(LocalModel(path)).start()`, then a `hosted_vllm/` route to its URL.

The reply: the request's messages and tools rendered by the model's own chat template (that is
what the model sees: `prompt_token_ids`), sampled tokens (`choices[0].token_ids`) with the
log-probability of each under the unmodified model distribution (`logprobs.content`, like vLLM's
raw logprobs), parsed into text and tool calls: `<tool_call>{"name", "arguments"}</tool_call>`
blocks become `tool_calls`, a leading `<think>...</think>` becomes `reasoning_content`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from pomona.proxy import neutral
from pomona.proxy.dialects import DIALECTS, Dialect, ToolCall
from pomona.proxy.dialects.base import text_of
from pomona.proxy.neutral import Action
from pomona.proxy.server import AppServer

PROVIDER = "transformers"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_THINK = re.compile(r"^\s*<think>(.*?)</think>", re.S)


# --- requests -> the chat-template shape ------------------------------------------------------


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def from_neutral(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c.get("id") or "",
                "type": "function",
                "function": {"name": c["name"], "arguments": _arguments_text(c["arguments"])},
            }
            for c in message["tool_calls"]
        ]
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    return out


def _chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions message as chat templates take it, tool-call arguments kept verbatim
    (re-serialising them would change the very tokens the model was shown)."""
    role = {"developer": "system", "function": "tool"}.get(m.get("role", "user"), m.get("role"))
    out: dict[str, Any] = {"role": role or "user", "content": text_of(m.get("content"))}
    calls = [c for c in m.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        out["tool_calls"] = [
            {
                "id": str(c.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str((c.get("function") or {}).get("name") or ""),
                    "arguments": _arguments_text((c.get("function") or {}).get("arguments") or {}),
                },
            }
            for c in calls
        ]
    if role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id") or m.get("name") or "")
    return out


def template_messages(dialect: Dialect, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation of a request in the shape Hugging Face chat templates expect
    (OpenAI-style: tool calls as {id, type, function: {name, arguments (JSON text)}})."""
    if dialect.name == "chat":
        return [_chat_message(m) for m in body.get("messages") or [] if isinstance(m, dict)]
    return [from_neutral(m) for m in neutral.messages(dialect, body)]


def template_tools(dialect: Dialect, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools as chat templates expect them ({type, function})."""
    return [{"type": "function", "function": t} for t in neutral.tools(dialect, body)]


def neutral_to_template(observation: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """A dialect-neutral observation (messages, tools) in the chat-template shape."""
    messages = [from_neutral(m) for m in observation.get("messages") or []]
    tools = [{"type": "function", "function": t} for t in observation.get("tools") or []]
    return messages, tools


# --- the model -------------------------------------------------------------------------------


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # stop | length


@dataclass
class Parsed:
    text: str
    tool_calls: list[ToolCall]
    reasoning: str | None


class LocalModel:
    """A Hugging Face model directory loaded for generation on the CPU (or `device`).
    Generation is serialised: one model, one forward pass at a time.

    A reply is at most `max_new_tokens` long whatever the request asks. Harnesses ask for their
    own defaults (pi 16,384 tokens, whatever the model), which can exceed a small model's
    context and would take a CPU hours; vLLM would refuse such a request, this server caps it
    and refuses only a prompt that leaves no room for the capped reply."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        device: str = "cpu",
        max_new_tokens: int = 256,
        temperature: float = 1.0,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(path)
        if not (self.path / "config.json").exists():
            raise ValueError(f"{self.path} is not a Hugging Face model directory (no config.json)")
        self.name = name or self.path.name
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        if not self.tokenizer.chat_template:
            raise ValueError(f"the tokenizer in {self.path} has no chat template")
        loaded = AutoModelForCausalLM.from_pretrained(str(self.path))
        # transformers declares `to` through @wraps(torch.nn.Module.to), which mypy reads as
        # taking the model itself first: its hint, not the call, is wrong
        self.model = loaded.to(device).eval()  # type: ignore[arg-type]
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature  # for requests that name none (OpenAI's default is 1)
        self.context = int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)
        self._lock = threading.Lock()

    def variant(
        self,
        *,
        name: str | None = None,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
    ) -> LocalModel:
        """The same weights (and the same one-at-a-time lock) under other defaults."""
        other = copy.copy(self)
        other.name = name or self.name
        if temperature is not None:
            other.temperature = float(temperature)
        if max_new_tokens is not None:
            other.max_new_tokens = int(max_new_tokens)
        return other

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        offered: list[dict[str, Any] | Callable[..., Any]] = list(tools)
        rendered = self.tokenizer.apply_chat_template(
            messages, tools=offered or None, add_generation_prompt=True, return_dict=True
        )
        if not isinstance(rendered, Mapping):  # return_dict: a BatchEncoding, whatever the hint
            raise TypeError(f"the chat template rendered a {type(rendered).__name__}, not a dict")
        return list(rendered["input_ids"])

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """One token sequence decoded (a batch would decode to a list)."""
        decoded = self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        if not isinstance(decoded, str):
            raise TypeError(f"the tokenizer decoded one sequence as a {type(decoded).__name__}")
        return decoded

    def generate(
        self,
        prompt_ids: list[int],
        *,
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Generation:
        import torch

        budget = min(max_new_tokens or self.max_new_tokens, self.max_new_tokens)
        if len(prompt_ids) + budget > self.context:
            raise ValueError(
                f"the prompt ({len(prompt_ids)} tokens) plus the reply ({budget} tokens) exceeds "
                f"the model's context of {self.context} tokens"
            )
        eos = self.tokenizer.eos_token_id
        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            inputs = torch.tensor([prompt_ids], device=self.device)
            sample = temperature > 0
            out = self.model.generate(
                inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=budget,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=top_p if sample else None,
                top_k=0 if sample else None,
                eos_token_id=eos,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,
            )
        completion = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            float(torch.log_softmax(step[0].float(), -1)[token])
            for step, token in zip(out.logits, completion, strict=False)
        ]
        finish = "stop" if completion and completion[-1] == eos else "length"
        return Generation(list(prompt_ids), completion, logprobs, finish)

    def parse(self, completion_ids: list[int]) -> Parsed:
        """Text, tool calls and reasoning from the generated tokens (the end token dropped)."""
        text = self.decode(completion_ids)
        for marker in (self.tokenizer.eos_token, self.tokenizer.pad_token):
            if marker:
                text = text.replace(marker, "")
        reasoning = None
        think = _THINK.match(text)
        if think:
            reasoning, text = think.group(1).strip() or None, text[think.end() :]
        calls: list[ToolCall] = []

        def take(match: re.Match[str]) -> str:
            try:
                value = json.loads(match.group(1))
            except ValueError:
                return match.group(0)  # not a call: leave it as the text it is
            if not isinstance(value, dict) or not isinstance(value.get("name"), str):
                return match.group(0)
            args = value.get("arguments")
            calls.append(ToolCall(value["name"], args if isinstance(args, dict) else {}))
            return ""

        text = _CALL.sub(take, text)  # kept as generated: a harness sends it back verbatim
        return Parsed(text if text.strip() else "", calls, reasoning)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A Chat Completions response object for a request body, in vLLM's shape."""
        chat = DIALECTS["chat"]
        messages, tools = template_messages(chat, body), template_tools(chat, body)
        if not messages:
            raise ValueError("messages must be a non-empty list")
        temperature = body.get("temperature")
        gen = self.generate(
            self.prompt_ids(messages, tools),
            max_new_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
            temperature=self.temperature if temperature is None else float(temperature),
            top_p=float(body.get("top_p") or 1.0),
            seed=body.get("seed"),
        )
        parsed = self.parse(gen.completion_ids)
        final = neutral.render(
            chat, Action(parsed.text or None, parsed.tool_calls), self.name, body
        )
        choice = final["choices"][0]
        if gen.finish_reason == "length":
            choice["finish_reason"] = "length"
        if parsed.reasoning is not None:
            choice["message"]["reasoning_content"] = parsed.reasoning
        final["usage"] = {
            "prompt_tokens": len(gen.prompt_ids),
            "completion_tokens": len(gen.completion_ids),
            "total_tokens": len(gen.prompt_ids) + len(gen.completion_ids),
        }
        if body.get("return_token_ids"):
            final["prompt_token_ids"] = gen.prompt_ids
            choice["token_ids"] = gen.completion_ids
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {
                        "token": (piece := self.decode([t])),
                        "logprob": lp,
                        "bytes": list(piece.encode()),
                        "top_logprobs": [],
                    }
                    for t, lp in zip(gen.completion_ids, gen.logprobs, strict=True)
                ]
            }
        return final

    def act(self, observation: dict[str, Any], **sampling: Any) -> Action:
        """An in-process policy: the reply to a dialect-neutral observation (ModelCallEnv's)."""
        messages, tools = neutral_to_template(observation)
        gen = self.generate(self.prompt_ids(messages, tools), **sampling)
        parsed = self.parse(gen.completion_ids)
        return Action(parsed.text or None, parsed.tool_calls)


# --- serving ---------------------------------------------------------------------------------


def create_app(model: LocalModel) -> FastAPI:
    """An OpenAI-compatible app (chat completions, streamed or not, and the model list)."""
    chat = DIALECTS["chat"]
    app = FastAPI(title="pomona local model", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse(chat.error(status, message), status_code=status)

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return error(400, f"malformed JSON body: {e}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error(400, "the body must be an object with a messages list")
        try:
            final = await anyio.to_thread.run_sync(model.complete, body)
        except (ValueError, TypeError) as e:
            return error(400, str(e))
        if not chat.is_stream(body):
            return JSONResponse(final)
        return StreamingResponse(
            iter(list(chat.events(final, body))), media_type="text/event-stream"
        )

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": model.name, "object": "model", "owned_by": "local"}]}
        )

    return app


class LocalModelServer(AppServer):
    """A LocalModel served on a free port; `url` + "/v1" is its OpenAI base URL."""

    def __init__(self, model: LocalModel, *, host: str = "127.0.0.1", port: int = 0):
        self.model = model
        super().__init__(create_app(model), host=host, port=port)


_DEFAULTS = ("temperature", "max_tokens")  # route params that become the server's defaults
_models: dict[str, LocalModel] = {}
_served: dict[tuple[str, str, float | None, int | None], LocalModelServer] = {}
_served_lock = threading.Lock()


def served_route(route: Any) -> Any:
    """For a `transformers/<model dir>` route: the equivalent vLLM route to this process's
    server for that directory, started on first use and kept for the process's lifetime.

    The route's `temperature` and `max_tokens` are that server's defaults for requests naming
    none (`max_tokens` also caps every reply), so routes to one directory can differ (greedy
    and sampled) while sharing one copy of the weights."""
    from pomona.proxy.config import ModelRoute

    path = str(Path(route.upstream_model).expanduser().resolve())
    temperature, max_tokens = (route.params.get(k) for k in _DEFAULTS)
    key = (path, route.name, temperature, max_tokens)
    with _served_lock:
        if key not in _served:
            if path not in _models:
                _models[path] = LocalModel(path)
            model = _models[path].variant(
                name=route.name, temperature=temperature, max_new_tokens=max_tokens
            )
            _served[key] = LocalModelServer(model).start()
        server = _served[key]
    params = {k: v for k, v in route.params.items() if k not in _DEFAULTS}
    params.update(model=f"hosted_vllm/{route.name}", api_base=f"{server.url}/v1")
    params.setdefault("api_key", "local")
    return ModelRoute(route.name, params, frozenset({"chat"}), True)
