"""Record and replay: a re-run of the same harness on the same task is answered with a recorded
episode's replies, turn by turn, and each request it sends is checked against the recorded one.

    replayer = Replayer(recorded_calls)                    # rows of the `calls` table
    records = await rollout([task], "pi", policy=replayer)  # the harness re-runs, replayed
    replayer.report(records[0].episode).divergence         # None, or the first difference

It is a policy for the `policy` upstream (pomona.proxy.policy): the proxy holds each main call
of the re-run and the replayer answers with the recorded reply of the same turn, rendered into
the harness's dialect, streamed or not. A replayed run is recorded like any other, so two runs
can be compared row by row.

`upto=t` replays turns 0..t-1 only and hands the rest to `then` (any policy): that brings the
harness, its sandbox and its conversation to the state of turn t, which is how credit is
measured by branching (pomona.trainer.branching).

The comparison is of the dialect-neutral conversation and tools. Tool-call ids are compared by
position, not value: a replayed reply gets fresh ids, and the harness sends those back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pomona.errors import UsageError
from pomona.proxy import neutral
from pomona.proxy.dialects import DIALECTS
from pomona.proxy.dialects.base import ToolCall
from pomona.proxy.neutral import Action

PolicyFn = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class RecordedTurn:
    """One recorded main call: what the harness sent (neutral form) and the reply it got."""

    sequence: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply: Action


@dataclass
class Divergence:
    turn: int
    where: str  # a path into the neutral request, e.g. messages[3].content
    recorded: Any
    replayed: Any

    def __str__(self) -> str:
        return f"turn {self.turn}: {self.where} was {self.recorded!r}, now {self.replayed!r}"


@dataclass
class ReplayReport:
    turns: int = 0  # turns the harness asked for
    replayed: int = 0  # answered from the recording
    continued: int = 0  # answered by the `then` policy
    divergence: Divergence | None = None  # the first request that differs from the recording
    exhausted: bool = False  # the harness asked for more turns than were recorded

    @property
    def faithful(self) -> bool:
        return self.divergence is None and not self.exhausted


def response_message(dialect: str, response: dict[str, Any]) -> dict[str, Any]:
    """The neutral assistant message a recorded response amounts to (its text and tool calls)."""
    if dialect == "chat":
        choice = (response.get("choices") or [{}])[0] or {}
        body = {"messages": [{**(choice.get("message") or {}), "role": "assistant"}]}
    elif dialect == "responses":
        body = {"input": response.get("output") or []}
    else:
        body = {"messages": [{"role": "assistant", "content": response.get("content") or []}]}
    parts = [m for m in neutral.messages(DIALECTS[dialect], body) if m["role"] == "assistant"]
    out: dict[str, Any] = {"role": "assistant", "content": "".join(m["content"] for m in parts)}
    calls = [c for m in parts for c in m.get("tool_calls") or []]
    if calls:
        out["tool_calls"] = calls
    return out


def recorded_turns(calls: list[dict[str, Any]]) -> list[RecordedTurn]:
    """The policy turns of one recorded episode (main calls that completed, in order; a
    retried request counted once)."""
    rows = sorted(
        (c for c in calls if not c.get("side") and c.get("status") == "ok"),
        key=lambda c: c["sequence"],
    )
    out: list[RecordedTurn] = []
    previous: Any = None
    for row in rows:
        request, response = json.loads(row["request"]), json.loads(row["response"])
        if out and request == previous:
            continue
        previous = request
        d = DIALECTS[row["dialect"]]
        message = response_message(row["dialect"], response)
        calls_ = [ToolCall(c["name"], c["arguments"] if isinstance(c["arguments"], dict) else {})
                  for c in message.get("tool_calls") or []]  # fmt: skip
        out.append(
            RecordedTurn(
                row["sequence"],
                neutral.messages(d, request),
                neutral.tools(d, request),
                Action(message["content"] or None, calls_),
            )
        )
    return out


def _normalised(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with tool-call ids replaced by their order of first appearance."""
    ids: dict[str, str] = {}

    def alias(value: str) -> str:
        return ids.setdefault(value, f"<id {len(ids)}>")

    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": alias(c.get("id", ""))} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            m["tool_call_id"] = alias(m["tool_call_id"])
        out.append(m)
    return out


def first_difference(recorded: Any, replayed: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first place two JSON values differ, as (path, recorded, replayed)."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for k in [*recorded, *(k for k in replayed if k not in recorded)]:
            found = first_difference(recorded.get(k), replayed.get(k), f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(recorded) != len(replayed):
            return f"{where} length", len(recorded), len(replayed)
        return None
    return None if recorded == replayed else (where or "value", recorded, replayed)


class Replayer:
    """A policy answering each episode it sees with the recorded replies (see the module doc).
    One replayer serves any number of re-runs at once; each is tracked by its episode key."""

    def __init__(
        self,
        calls: list[dict[str, Any]] | list[RecordedTurn],
        *,
        upto: int | None = None,
        then: PolicyFn | None = None,
    ):
        self.turns = (
            list(calls) if calls and isinstance(calls[0], RecordedTurn) else recorded_turns(calls)  # type: ignore[arg-type]
        )
        self.upto = len(self.turns) if upto is None else upto
        if not 0 <= self.upto <= len(self.turns):
            raise UsageError(f"upto must be within 0..{len(self.turns)}, not {upto}")
        self.then = then
        self._reports: dict[str, ReplayReport] = {}
        self._lock = threading.Lock()

    def report(self, episode: str) -> ReplayReport:
        with self._lock:
            return self._reports.setdefault(episode, ReplayReport())

    def __call__(self, observation: dict[str, Any]) -> Any:
        report = self.report(str(observation.get("episode")))
        i = report.turns
        report.turns += 1
        if i < self.upto:
            turn = self.turns[i]
            if report.divergence is None:
                diff = first_difference(
                    {"messages": _normalised(turn.messages), "tools": turn.tools},
                    {"messages": _normalised(observation.get("messages") or []),
                     "tools": observation.get("tools") or []},
                )  # fmt: skip
                if diff is not None:
                    report.divergence = Divergence(i, diff[0].lstrip("."), diff[1], diff[2])
            report.replayed += 1
            return turn.reply
        if self.then is not None:
            report.continued += 1
            return self.then(observation)
        report.exhausted = True
        return Action(text="")
