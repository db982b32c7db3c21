"""Recorded episodes as the trainer reads them: the `episodes` row and its policy turns.

A policy turn is a main call (not a side call) that completed (`status == "ok"`), in sequence
order. A harness that retries the very request it just sent (same body) produces a second row
with the same answer; only one of them is a turn. Episodes without a trustworthy reward (an
infra failure, or no `episodes` row yet because the run is still going or crashed) are left out
unless asked for: infra failures are data, never a reward of 0.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona import trajectories
from pomona.benchmarks import metrics
from pomona.errors import NoData
from pomona.proxy import sse
from pomona.proxy.dialects import DIALECTS
from pomona.proxy.local_model import from_neutral, template_messages, template_tools
from pomona.proxy.replay import response_message

Message = dict[str, Any]


@dataclass
class Turn:
    """One policy turn: what the model was shown and what it answered, in chat-template shape,
    with the token ids and logprobs the upstream returned (None when it returned none)."""

    sequence: int
    dialect: str  # of the conversation the model saw: the upstream's wire, else the caller's
    messages: list[Message]
    tools: list[dict[str, Any]]
    reply: Message
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    sampling: dict[str, Any] | None = None  # the sampling parameters sent to the engine
    pinned: bool | None = None  # made under its model's pinned sampling (None: no pin)
    pinned_reason: str | None = None
    model: str | None = None

    @property
    def tokens(self) -> tuple[list[int], list[int]] | None:
        """(prompt ids, completion ids) when the upstream returned both, else None."""
        if self.prompt_ids is None or self.completion_ids is None:
            return None
        return self.prompt_ids, self.completion_ids

    @property
    def has_tokens(self) -> bool:
        return self.tokens is not None


@dataclass
class Episode:
    row: dict[str, Any]
    turns: list[Turn] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.row["episode"]

    @property
    def reward(self) -> float | None:
        return self.row.get("reward")

    @property
    def resolved(self) -> bool | None:
        return self.row.get("resolved")

    @property
    def task(self) -> str:
        return self.row.get("task") or ""

    @property
    def metadata(self) -> dict[str, Any]:
        try:
            return json.loads(self.row.get("metadata") or "{}")
        except ValueError:
            return {}

    def conversation(self) -> tuple[list[Message], list[dict[str, Any]]]:
        """The whole episode as one conversation: the last turn's messages plus its reply."""
        if not self.turns:
            return [], []
        last = self.turns[-1]
        return [*last.messages, last.reply], last.tools


def reply_message(dialect: str, response: dict[str, Any]) -> Message:
    """The assistant message a recorded response amounts to, in chat-template shape (for chat,
    tool-call arguments verbatim; reasoning is not carried: harnesses do not send it back)."""
    if dialect != "chat":
        return from_neutral(response_message(dialect, response))
    choice = (response.get("choices") or [{}])[0] or {}
    message = {**(choice.get("message") or {}), "role": "assistant"}
    return template_messages(DIALECTS["chat"], {"messages": [message]})[0]


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def model_view(row: dict[str, Any]) -> tuple[str, Any, Any]:
    """A call's dialect, request and response as the model saw them: the upstream's own when the
    proxy reached one, else the client's. They differ when the proxy translated the call (an
    Anthropic or Responses caller of a chat upstream): the token ids come from the upstream's
    answer, so the conversation they belong to is the one sent upstream (LiteLLM's rewriting
    of tool schemas and messages included), not the one the harness sent."""
    dialect = row.get("upstream_dialect")
    request = _json(row.get("upstream_request"))
    text = row.get("upstream_response")
    if dialect in DIALECTS and isinstance(request, dict) and text:
        headers = _json(row.get("upstream_response_headers")) or {}
        kind = next((str(v) for k, v in headers.items() if k.lower() == "content-type"), "")
        if "text/event-stream" in kind:
            frames, _ = sse.Parser().feed(text.encode() + b"\n\n")
            response = DIALECTS[dialect].assemble(frames)
        else:
            response = _json(text)
        if isinstance(response, dict):
            return dialect, request, response
    return row["dialect"], _json(row.get("request")), _json(row.get("response"))


def turn_of(row: dict[str, Any]) -> Turn | None:
    """The turn a recorded main call amounts to (as the model saw it); None when its bodies
    cannot be read."""
    dialect, request, response = model_view(row)
    if not isinstance(request, dict) or not isinstance(response, dict):
        return None
    d = DIALECTS[dialect]
    return Turn(
        sequence=row["sequence"],
        dialect=dialect,
        messages=template_messages(d, request),
        tools=template_tools(d, request),
        reply=reply_message(dialect, response),
        prompt_ids=row.get("prompt_token_ids"),
        completion_ids=row.get("completion_token_ids"),
        logprobs=row.get("completion_logprobs"),
        sampling=_json(row.get("sampling")),
        pinned=row.get("sampling_pinned"),
        pinned_reason=row.get("sampling_pinned_reason"),
        model=row.get("model"),
    )


def _turns(rows: list[dict[str, Any]]) -> list[Turn]:
    rows = sorted(rows, key=lambda r: r["sequence"] if r["sequence"] is not None else 1 << 62)
    out: list[Turn] = []
    last_request: Any = None
    for row in rows:
        request = json.loads(row["request"]) if row.get("request") else None
        if out and request == last_request:  # a retry of the call just answered
            continue
        turn = turn_of(row)
        if turn is not None:
            out.append(turn)
            last_request = request
    return out


@dataclass(frozen=True)
class Filters:
    """Which episodes to take. None means any."""

    resolved: bool | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    harness: Sequence[str] | None = None
    model: Sequence[str] | None = None
    task: Sequence[str] | None = None
    include_failed: bool = False  # also episodes with an infra failure or no reward
    include_helpers: bool = False  # also a judge's or simulated user's episodes (not the policy's)

    def accept(self, row: dict[str, Any]) -> bool:
        scored = row.get("failure_kind") in (None, "none") and row.get("reward") is not None
        if not scored and not self.include_failed:
            return False
        if not self.include_helpers and not metrics.is_attempt(row):
            return False
        reward = row.get("reward")
        checks = [
            self.resolved is None or bool(row.get("resolved")) == self.resolved,
            self.min_reward is None or (reward is not None and reward >= self.min_reward),
            self.max_reward is None or (reward is not None and reward <= self.max_reward),
            not self.harness or row.get("harness") in self.harness,
            not self.model or row.get("model") in self.model,
            not self.task or row.get("task") in self.task,
        ]
        return all(checks)


def load(
    runs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    filters: Filters | None = None,
) -> list[Episode]:
    """The episodes of one or several trajectory directories that pass `filters`, each with its
    policy turns, in the order their episodes rows were written."""
    dirs = [runs] if isinstance(runs, str | os.PathLike) else list(runs)
    filters = filters or Filters()
    episodes: list[Episode] = []
    for directory in dirs:
        if not Path(directory).is_dir():
            raise NoData(f"no trajectory directory at {directory}")
        rows = [
            r for r in trajectories.read(directory, "episodes").to_pylist() if filters.accept(r)
        ]
        if not rows:
            continue
        wanted = {r["episode"] for r in rows}
        calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for call in trajectories.read(directory, "calls").to_pylist():
            if call["episode"] in wanted and not call["side"] and call["status"] == "ok":
                calls[call["episode"]].append(call)
        seen: set[str] = set()
        for row in rows:
            if row["episode"] in seen:  # one row per episode; a second close is ignored
                continue
            seen.add(row["episode"])
            episodes.append(Episode(row, _turns(calls.get(row["episode"], []))))
    return episodes
