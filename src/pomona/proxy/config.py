"""Proxy configuration, and the model list in LiteLLM's own `model_list` YAML shape.

    model_list:
      - model_name: qwen                        # what clients ask for
        litellm_params:
          model: hosted_vllm/Qwen/Qwen3-8B      # provider/model, as LiteLLM spells it
          api_base: http://gpu:8000/v1
          api_key: os.environ/VLLM_KEY          # resolved from the environment at load
        model_info:
          pomona:                               # optional; defaults by provider
            dialects: [chat]                    # what the upstream speaks natively
            token_ids: true                     # ask it for token ids and logprobs
            timeouts: {connect: 5, read: 120, total: 900}   # seconds; null: no limit
            kind: litellm                       # which upstream module serves it
            pin: {temperature: 1.0, max_tokens: 512, seed: per_call}   # sampling.py

A caller whose dialect the upstream speaks natively is passed through unchanged; any other
dialect is translated by LiteLLM. `kind` picks the module that talks to the upstream
(`pomona.proxy.upstream.KINDS`); the default, `litellm`, does both of the above.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TypedDict, Unpack

import yaml

from pomona.errors import UsageError
from pomona.proxy.sampling import Pin

SCRIPTED = "scripted"

# Which caller dialects each provider serves natively, so they can be passed through.
_NATIVE = {
    "openai": ("chat", "responses"),
    "hosted_vllm": ("chat",),
    "vllm": ("chat",),
    "sglang": ("chat",),
    "anthropic": ("anthropic",),
}
_TOKEN_ID_PROVIDERS = ("hosted_vllm", "vllm", "sglang")
_DEFAULT_BASES = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
DEFAULT_KIND = "litellm"


@dataclass(frozen=True)
class Timeouts:
    """Upstream time limits in seconds (None: no limit). `read` bounds each wait for bytes, so a
    stream that keeps sending never hits it; `total` bounds the whole call, stream included."""

    connect: float | None = 10.0
    read: float | None = 600.0
    total: float | None = None

    @classmethod
    def parse(cls, value: Any, base: Timeouts | None = None) -> Timeouts:
        """From {connect, read, total} (missing keys keep `base`'s), or one number for `total`."""
        base = base or cls()
        if value is None:
            return base
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = {"total": value}
        if not isinstance(value, dict) or set(value) - {"connect", "read", "total"}:
            raise UsageError(
                f"timeouts must be a number or {{connect, read, total}}, not {value!r}"
            )
        fields = {}
        for name in ("connect", "read", "total"):
            v = value.get(name, getattr(base, name))
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
                raise UsageError(f"timeout {name} must be a positive number of seconds, not {v!r}")
            fields[name] = None if v is None else float(v)
        return cls(**fields)


def _resolve(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("os.environ/"):
        return os.environ.get(value.removeprefix("os.environ/"))
    return value


@dataclass(frozen=True)
class ModelRoute:
    """One `model_list` entry."""

    name: str
    params: dict[str, Any]
    dialects: frozenset[str]
    token_ids: bool
    timeouts: Timeouts = Timeouts()
    kind: str = DEFAULT_KIND
    pin: Pin | None = None  # sampling forced or refused for every call (sampling.py)

    @classmethod
    def from_entry(cls, entry: dict[str, Any], timeouts: Timeouts | None = None) -> ModelRoute:
        """One `model_list` entry; `timeouts` are the proxy-wide defaults it may override."""
        name = entry.get("model_name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise UsageError(f"model_list entry {entry!r} has no model_name")
        params = {k: _resolve(v) for k, v in (entry.get("litellm_params") or {}).items()}
        if not isinstance(params.get("model"), str):
            raise UsageError(f"model_list entry {name!r} has no litellm_params.model")
        provider = params["model"].split("/", 1)[0] if "/" in params["model"] else "openai"
        extra = ((entry.get("model_info") or {}).get("pomona")) or {}
        dialects = frozenset(extra.get("dialects", _NATIVE.get(provider, ())))
        token_ids = bool(extra.get("token_ids", provider in _TOKEN_ID_PROVIDERS))
        limits = Timeouts.parse(params.pop("timeout", None), timeouts)  # LiteLLM's own key: total
        limits = Timeouts.parse(extra.get("timeouts"), limits)
        kind = str(extra.get("kind", DEFAULT_KIND))
        try:
            pin = Pin.parse(extra.get("pin"))
        except ValueError as e:
            raise UsageError(f"model_list entry {name!r}: {e}") from None
        return cls(name, params, dialects, token_ids, limits, kind, pin)

    @property
    def provider(self) -> str:
        return self.params["model"].split("/", 1)[0] if "/" in self.params["model"] else "openai"

    @property
    def upstream_model(self) -> str:
        """The model name the upstream itself expects (without LiteLLM's provider prefix, nor
        its `responses/` bridge marker)."""
        m: str = self.params["model"]
        m = m.split("/", 1)[1] if "/" in m else m
        return m.removeprefix("responses/")

    def path_for(self, dialect: str) -> str:
        """How a call in `dialect` reaches this upstream: unchanged, or translated by LiteLLM."""
        return "passthrough" if dialect in self.dialects else "litellm"

    @property
    def api_base(self) -> str:
        base = self.params.get("api_base") or _DEFAULT_BASES.get(self.provider, "")
        return base.rstrip("/")


class ProxyOptions(TypedDict, total=False):
    """ProxyConfig's settings besides its model list (for the constructors that read one)."""

    trajectories: str | os.PathLike[str] | None
    public_url: str | None
    max_body_bytes: int
    timeouts: Timeouts
    default_script: list[str]
    durable: bool
    api_keys: dict[str, str]


@dataclass
class ProxyConfig:
    models: list[ModelRoute] = field(default_factory=list)
    # a directory or an object store URI; None: record nothing (a standalone scripted upstream)
    trajectories: str | os.PathLike[str] | None = None
    public_url: str | None = None  # how clients reach the proxy; default: the request's own host
    max_body_bytes: int = 32 * 1024 * 1024
    timeouts: Timeouts = Timeouts()  # defaults for every route; a route's model_info overrides
    default_script: list[str] = field(default_factory=list)  # scripted answers outside any episode
    durable: bool = False  # fsync every recorded call
    api_keys: dict[str, str] = field(default_factory=dict)  # name -> key; empty: no auth

    @classmethod
    def from_model_list(
        cls, model_list: list[dict[str, Any]], **options: Unpack[ProxyOptions]
    ) -> ProxyConfig:
        """A config from `model_list` entries (their timeouts default to `options`' own)."""
        timeouts = options.get("timeouts") or Timeouts()
        return cls(models=[ModelRoute.from_entry(e, timeouts) for e in model_list], **options)

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str] | None, **options: Unpack[ProxyOptions]
    ) -> ProxyConfig:
        """A config from a YAML file with a `model_list` (none: no models but `scripted`)."""
        data = yaml.safe_load(Path(path).read_text()) if path else {}
        return cls.from_model_list((data or {}).get("model_list") or [], **options)

    def route(self, model: str) -> ModelRoute | None:
        """The model list's route for `model`, else the one a local model gets without a list
        (`smollm2`, a model directory or GGUF path: implicit_route)."""
        found = next((m for m in self.models if m.name == model), None)
        if found is None and model != SCRIPTED:
            found = implicit_route(model)
        return found

    def model_names(self) -> list[str]:
        return [SCRIPTED, *(m.name for m in self.models)]


def implicit_route(model: str) -> ModelRoute | None:
    """The route a model name gets without a model list: a built-in local model whose wheel is
    installed, or the path of a model directory or GGUF file (greedy, replies of at most 256
    tokens; served by local_model.py); None for any other name."""
    from pomona.proxy.local_model import BUILTIN, PROVIDER  # torch and fastapi only when needed

    if model in BUILTIN:
        if find_spec(BUILTIN[model][0]) is None:
            return None
    elif not (model.endswith(".gguf") or os.sep in model) or not Path(model).expanduser().exists():
        return None
    params = {"model": f"{PROVIDER}/{model}", "temperature": 0, "max_tokens": 256}
    return ModelRoute.from_entry({"model_name": model, "litellm_params": params})
