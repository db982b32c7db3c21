"""Sampling pinned at the proxy, so "on-policy" is checked per call rather than hoped for.

A route may pin how its model samples (model_list entry, `model_info.pomona.pin`):

    pin:
      temperature: 1.0
      top_p: 1.0
      max_tokens: 512
      seed: per_call        # an integer: that seed every call; per_call: a fresh one per call
      conflict: force       # force: the pinned value replaces the request's | refuse: a request
                            # naming another value is refused (400); or per parameter:
                            # {temperature: refuse, max_tokens: force}
      side: force           # auxiliary calls (titles, tool-less side calls): force | refuse |
                            # allow (sent as asked; recorded as not pinned)

Harnesses name their own values (pi asks for 16,384 completion tokens, Claude Code for none of
temperature), so an unpinned run samples under whatever each harness sends and its samples are
only on-policy by chance. A pinned parameter is written into the request before it goes
upstream, in the caller's dialect (chat `max_tokens` or `max_completion_tokens`, Responses
`max_output_tokens`; a seed only reaches chat-speaking engines).

Every call's row records the parameters *as sent to the engine* (`sampling`, read back from the
upstream request body the proxy captured, not from what it meant to send) and whether they are
the pinned ones (`sampling_pinned`, with `sampling_pinned_reason`): the trainer's on-policy
report (pomona.trainer.onpolicy) counts trained tokens by that verdict.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pomona.errors import UsageError
from pomona.proxy.errors import BadRequest

PARAMS = ("temperature", "top_p", "max_tokens", "seed")
PER_CALL = "per_call"
CONFLICTS = ("force", "refuse")
SIDES = ("force", "refuse", "allow")
_MAX_TOKENS = {"chat": ("max_completion_tokens", "max_tokens"), "responses": ("max_output_tokens",),
               "anthropic": ("max_tokens",)}  # fmt: skip


class PinRefused(BadRequest):
    """A request asked for sampling its model's pin does not allow."""

    row_status = "refused"

    def __init__(self, message: str):
        super().__init__(400, message, "sampling_pinned")


def _number(name: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"pin {name} must be a number, not {value!r}")
    if name in ("max_tokens", "seed") and (not isinstance(value, int) or value < 0):
        raise UsageError(f"pin {name} must be a non-negative integer, not {value!r}")
    return value


@dataclass(frozen=True)
class Pin:
    """One route's pinned sampling."""

    values: Mapping[str, Any]  # parameter -> value (seed may be PER_CALL)
    conflict: Mapping[str, str]  # parameter -> force | refuse
    side: str = "force"

    @classmethod
    def parse(cls, value: Any) -> Pin | None:
        """From a model_list `pin` mapping (None: no pin); a clear error for anything else."""
        if value is None:
            return None
        if not isinstance(value, dict) or not set(value) <= {*PARAMS, "conflict", "side"}:
            raise UsageError(f"pin must be a mapping of {', '.join(PARAMS)}, conflict and side, "
                             f"not {value!r}")  # fmt: skip
        values = {k: value[k] for k in PARAMS if value.get(k) is not None}
        for k, v in values.items():
            if not (k == "seed" and v == PER_CALL):
                values[k] = _number(k, v)
        if not values:
            raise UsageError("pin names no parameter to pin")
        conflict = value.get("conflict", "force")
        per: dict[str, Any] = (
            conflict if isinstance(conflict, dict) else dict.fromkeys(values, conflict)
        )
        bad = {k: v for k, v in per.items() if k not in values or v not in CONFLICTS}
        if bad:
            raise UsageError(f"pin conflict must be force or refuse for pinned parameters: {bad!r}")
        side = value.get("side", "force")
        if side not in SIDES:
            raise UsageError(f"pin side must be one of {', '.join(SIDES)}, not {side!r}")
        return cls(values, {k: str(per.get(k, "force")) for k in values}, side)

    def wanted(self, sent: Mapping[str, Any]) -> dict[str, Any]:
        """The pinned values, with a per-call seed read from what was sent."""
        out = dict(self.values)
        if out.get("seed") == PER_CALL:
            out["seed"] = sent.get("seed") if isinstance(sent.get("seed"), int) else PER_CALL
        return out


def _asked(dialect: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling parameters a body names, under their common names."""
    out = {k: body[k] for k in ("temperature", "top_p", "seed") if body.get(k) is not None}
    extra = body.get("extra_body")
    if isinstance(extra, dict) and extra.get("seed") is not None:
        out.setdefault("seed", extra["seed"])
    for name in _MAX_TOKENS.get(dialect, ()):
        if body.get(name) is not None:
            out["max_tokens"] = body[name]
            break
    return out


def apply(
    pin: Pin | None, dialect: str, body: dict[str, Any], *, side: bool, seed_to: str | None
) -> dict[str, Any]:
    """The body with `pin` applied (the same object when nothing changes). A value the pin
    refuses raises PinRefused. `seed_to` says how a seed reaches the engine: "body" (a chat
    request), "extra_body" (translated by LiteLLM to a chat engine), None (it cannot)."""
    if pin is None or (side and pin.side == "allow"):
        return body
    if side and pin.side == "refuse":
        raise PinRefused("this model's sampling is pinned and it takes no auxiliary calls "
                         "(a tool-less side call such as a title)")  # fmt: skip
    asked = _asked(dialect, body)
    out = dict(body)
    for name, value in pin.values.items():
        if name == "seed" and seed_to is None:
            continue
        if value == PER_CALL:
            value = secrets.randbits(31)
        if pin.conflict[name] == "refuse" and name in asked and asked[name] != value != PER_CALL:
            raise PinRefused(f"this model's {name} is pinned to {value!r}; the request asks "
                             f"for {asked[name]!r}")  # fmt: skip
        if name == "max_tokens":
            names = _MAX_TOKENS.get(dialect, ("max_tokens",))
            used = [n for n in names if n in body] or [names[-1]]
            out.update(dict.fromkeys(used, value))
        elif name == "seed" and seed_to == "extra_body":
            out["extra_body"] = {**(body.get("extra_body") or {}), "seed": value}
        else:
            out[name] = value
    return out


def sent(dialect: str | None, request_body: bytes | None) -> dict[str, Any] | None:
    """The sampling parameters of the request the engine got (None: no upstream request)."""
    if dialect is None or not request_body:
        return None
    try:
        body = json.loads(request_body)
    except ValueError:
        return None
    return _asked(dialect, body) if isinstance(body, dict) else None


def verdict(
    pin: Pin | None, params: Mapping[str, Any] | None, *, model: str | None, side: bool
) -> tuple[bool | None, str]:
    """Was the call sampled under its model's pin? (None: the model has no pin.)"""
    if params is None:
        return None, "no engine was called (the scripted model, a policy, or a refusal)"
    if pin is None:
        return None, f"model {model!r} has no sampling pin"
    if side and pin.side == "allow":
        return False, "an auxiliary call, sent as the harness asked (pin side: allow)"
    wrong = []
    for name, value in pin.wanted(params).items():
        got = params.get(name)
        if value == PER_CALL or got != value:
            wrong.append(f"{name} {got!r} (pinned {value!r})" if got is not None
                         else f"no {name} sent (pinned {value!r})")  # fmt: skip
    if wrong:
        return False, "the engine was sent " + ", ".join(wrong)
    return True, "sampled under the pin: " + ", ".join(f"{k}={v!r}" for k, v in params.items())


def columns(
    pin: Pin | None, dialect: str | None, request_body: bytes | None, *, model: str | None,
    side: bool,
) -> dict[str, Any]:  # fmt: skip
    """The `calls` columns of one call's sampling."""
    params = sent(dialect, request_body)
    pinned, reason = verdict(pin, params, model=model, side=side)
    return {
        "sampling": None if params is None else json.dumps(params),
        "sampling_pinned": pinned,
        "sampling_pinned_reason": reason,
    }
