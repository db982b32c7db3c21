"""Proxy configuration, and the model list in LiteLLM's own `model_list` YAML shape.

    model_list:
      - model_name: qwen                        # what clients ask for
        litellm_params:
          model: hosted_vllm/Qwen/Qwen3-8B      # provider/model, as LiteLLM spells it
          api_base: http://gpu:8000/v1
          api_key: os.environ/VLLM_KEY          # resolved from the environment at load
        model_info:
          pomona: {dialects: [chat], token_ids: true}   # optional; defaults by provider

A caller whose dialect the upstream speaks natively is passed through unchanged; any other
dialect is translated by LiteLLM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> ModelRoute:
        params = {k: _resolve(v) for k, v in (entry.get("litellm_params") or {}).items()}
        if "model" not in params:
            raise ValueError(
                f"model_list entry {entry.get('model_name')!r} has no litellm_params.model"
            )
        provider = params["model"].split("/", 1)[0] if "/" in params["model"] else "openai"
        extra = ((entry.get("model_info") or {}).get("pomona")) or {}
        dialects = frozenset(extra.get("dialects", _NATIVE.get(provider, ())))
        token_ids = bool(extra.get("token_ids", provider in _TOKEN_ID_PROVIDERS))
        return cls(entry["model_name"], params, dialects, token_ids)

    @property
    def provider(self) -> str:
        return self.params["model"].split("/", 1)[0] if "/" in self.params["model"] else "openai"

    @property
    def upstream_model(self) -> str:
        """The model name the upstream itself expects (without LiteLLM's provider prefix)."""
        m = self.params["model"]
        return m.split("/", 1)[1] if "/" in m else m

    def path_for(self, dialect: str) -> str:
        """How a call in `dialect` reaches this upstream: unchanged, or translated by LiteLLM."""
        return "passthrough" if dialect in self.dialects else "litellm"

    @property
    def api_base(self) -> str:
        base = self.params.get("api_base") or _DEFAULT_BASES.get(self.provider, "")
        return base.rstrip("/")


@dataclass
class ProxyConfig:
    models: list[ModelRoute] = field(default_factory=list)
    trajectories: Path | None = None  # None: record nothing (e.g. a standalone scripted upstream)
    public_url: str | None = None  # how clients reach the proxy; default: the request's own host
    max_body_bytes: int = 32 * 1024 * 1024
    connect_timeout: float = 10.0
    upstream_timeout: float = 600.0
    default_script: list[str] = field(default_factory=list)  # scripted answers outside any episode
    durable: bool = False  # fsync every recorded call

    @classmethod
    def from_model_list(cls, model_list: list[dict[str, Any]], **kwargs: Any) -> ProxyConfig:
        return cls(models=[ModelRoute.from_entry(e) for e in model_list], **kwargs)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str] | None, **kwargs: Any) -> ProxyConfig:
        data = yaml.safe_load(Path(path).read_text()) if path else {}
        return cls.from_model_list((data or {}).get("model_list") or [], **kwargs)

    def route(self, model: str) -> ModelRoute | None:
        return next((m for m in self.models if m.name == model), None)

    def model_names(self) -> list[str]:
        return [SCRIPTED, *(m.name for m in self.models)]
