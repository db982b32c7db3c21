"""What the proxy accepts: request schemas for the three dialects and the episode routes.

The model-call schemas are deliberately lenient (unknown fields pass through untouched, as
upstreams may know them) and strict only about the fields the proxy itself reads: a body that
gets past them cannot make the proxy fail, and one that does not gets a 400 saying which field
is wrong, in the caller's dialect. The same models are the proxy's published OpenAPI document
(`GET /openapi.json`).
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pomona.errors import FailureKind
from pomona.proxy.errors import BadRequest, MalformedRequest, at_fault

MAX_DEPTH = 128
"""Deepest JSON nesting accepted; real requests (tool schemas included) stay far below it."""

Model = TypeVar("Model", bound=BaseModel)

KEY_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
"""Episode keys travel in URL paths, so they are URL-safe by construction."""


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class JsonSchema(_Open):
    """A tool's parameter schema: only the parts the proxy reads are checked."""

    type: str | list[str] | None = None
    properties: dict[str, dict[str, Any]] | None = None
    required: list[str] | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None


# --- OpenAI Chat Completions --------------------------------------------------------------------


class ChatFunction(_Open):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: JsonSchema | None = None


class ChatTool(_Open):
    type: str = "function"
    function: ChatFunction | None = None


class ChatMessage(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatRequest(_Open):
    """OpenAI Chat Completions (`POST /v1/chat/completions`), and vLLM's extensions."""

    model: str | None = None
    messages: list[ChatMessage]
    tools: list[ChatTool] | None = None
    functions: list[ChatFunction] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    logprobs: bool | None = None
    return_token_ids: bool | None = None


# --- OpenAI Responses ---------------------------------------------------------------------------


class ResponsesTool(_Open):
    type: str
    name: str | None = None
    parameters: JsonSchema | None = None


class ResponsesRequest(_Open):
    """OpenAI Responses (`POST /v1/responses`)."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | list[dict[str, Any]] | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None


# --- Anthropic Messages -------------------------------------------------------------------------


class AnthropicTool(_Open):
    name: str = Field(min_length=1)
    type: str | None = None
    input_schema: JsonSchema | None = None


class AnthropicMessage(_Open):
    role: str
    content: str | list[dict[str, Any]]


class AnthropicRequest(_Open):
    """Anthropic Messages (`POST /v1/messages`)."""

    model: str | None = None
    messages: list[AnthropicMessage]
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    stream: bool | None = None


class CountTokensRequest(_Open):
    model: str | None = None
    messages: list[AnthropicMessage] | None = None


REQUESTS: dict[str, type[BaseModel]] = {
    "chat": ChatRequest,
    "responses": ResponsesRequest,
    "anthropic": AnthropicRequest,
}


# --- episodes -----------------------------------------------------------------------------------


METADATA_COLUMNS = ("run", "benchmark", "task", "harness", "harness_version", "model", "runtime")
"""Metadata keys that fill `episodes` columns (the first four also fill each of its `calls` rows:
recording.EPISODE_COLUMNS)."""


class EpisodeSpec(BaseModel):
    """`POST /episodes`: what the episode's calls are routed to, and its scripted commands."""

    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(default=None, pattern=KEY_PATTERN)
    model: str | None = None
    script: str | list[str | list[str]] | None = None
    final: str = "done"
    metadata: dict[str, Any] | None = None
    tool_less_calls: Literal["side", "main"] = "side"
    policy_timeout: float | None = Field(default=None, gt=0)

    @field_validator("metadata")
    @classmethod
    def _columns(cls, v: Any) -> Any:
        wrong = [
            k for k in METADATA_COLUMNS if v and v.get(k) is not None and not isinstance(v[k], str)
        ]
        if wrong:
            raise ValueError(f"metadata {', '.join(wrong)} must be strings (they fill columns)")
        return v

    @field_validator("script")
    @classmethod
    def _commands(cls, v: Any) -> Any:
        if isinstance(v, list) and any(isinstance(c, list) and not c for c in v):
            raise ValueError("a parallel group of commands needs at least one command")
        return v

    def commands(self) -> list[str | list[str]]:
        """The script as a list: one string per line, or the list given."""
        if isinstance(self.script, str):
            return [line for line in self.script.splitlines() if line.strip()]
        return list(self.script or [])


class Artifact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    uri: str


class EpisodeOutcome(BaseModel):
    """`POST /episodes/KEY/close`: the outcome written to the `episodes` row."""

    model_config = ConfigDict(extra="forbid")

    reward: float | None = Field(default=None, allow_inf_nan=False)
    resolved: bool | None = None
    failure_kind: FailureKind = "none"
    failure_message: str | None = None
    artifacts: list[Artifact] | dict[str, str] | None = None
    run: str | None = None
    benchmark: str | None = None
    task: str | None = None
    harness: str | None = None
    harness_version: str | None = None
    runtime: str | None = None
    model: str | None = None

    def row(self) -> dict[str, Any]:
        """The `episodes` columns this outcome sets."""
        out = self.model_dump(exclude_unset=True)
        out.setdefault("failure_kind", "none")
        return out


class PolicyReply(BaseModel):
    """`POST /episodes/KEY/calls/N/reply`: the policy's action."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


# --- checking -----------------------------------------------------------------------------------


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether a parsed JSON value nests more than `limit` containers deep: level by level,
    each container visited once, no recursion (so no depth can overflow the stack)."""
    level = [value] if type(value) in (dict, list) else []
    for _ in range(limit):
        deeper: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            deeper.extend([c for c in children if type(c) is dict or type(c) is list])
        if not deeper:
            return False
        level = deeper
    return True


def parse_json(raw: bytes) -> Any:
    """JSON text -> value, refusing nesting deeper than MAX_DEPTH with a 400."""
    try:
        value = json.loads(raw)
    except RecursionError:
        value = None
        deep = True
    except ValueError as e:
        raise BadRequest(400, f"malformed JSON body: {e}", "invalid_json") from e
    else:
        # Cheap bound first: a body with few brackets cannot nest deeply.
        deep = raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and too_deep(value)
    if deep:
        raise BadRequest(400, f"JSON nests deeper than {MAX_DEPTH} levels", "invalid_json")
    return value


def check(dialect: str, body: dict[str, Any]) -> None:
    """Raise a 400 naming the field if `body` is not a request of `dialect`."""
    try:
        REQUESTS[dialect].model_validate(body)
    except ValidationError as e:
        raise MalformedRequest(f"invalid request: {at_fault(e.errors())}") from None


def validated(model: type[Model], data: Any) -> Model:
    """`model` from `data`, or MalformedRequest (a ValueError) naming the fields at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise MalformedRequest(at_fault(e.errors())) from None
