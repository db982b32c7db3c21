"""Keep secrets off disk: credentials are replaced before anything is written, in every table.

Two nets, because a secret can hide under any name and then be echoed anywhere:

- **By name.** Any header, JSON field or URL query parameter whose name says key, token, secret,
  password, authorization, cookie or credential (`api_key`, `openai-api-key`, `x-auth-token`,
  `apiKey`, `client_secret`, `Set-Cookie`...) has its value replaced by `[REDACTED]`. Only
  scalar values are secrets: a tool schema's `"token": {"type": "string"}` is kept, and so are
  the `token` texts of logprob entries and OpenAI's `prompt_cache_key`.
- **By value.** The values found that way, and the keys the proxy itself holds, are collected
  in a `Scrubber` that blanks them wherever else they appear in the row (an upstream error that
  quotes the key, a header echoed into a body).

A body with no secret is stored byte for byte as it came: redaction re-encodes only what it
changes, and a cheap scan skips the parse for bodies that name nothing secret.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[REDACTED]"

_LAST_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "authorization", "cookie",
     "auth", "credential", "credentials"}
)  # fmt: skip
_ANY_WORDS = frozenset({"secret", "password", "passwd", "authorization", "cookie", "apikey"})
NOT_SECRET = frozenset({"prompt_cache_key", "idempotency_key", "idempotency-key"})
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_FIELD_NAME = re.compile(r'"([^"\\]{1,128})"\s*:')


def may_hold_secret(text: str) -> bool:
    """Whether a JSON (or SSE) text has a field whose name says secret: one C-speed pass collects
    the field names, each distinct name is judged once (`max_tokens` or `prompt_cache_key`
    never cost a parse)."""
    return any(_judged(name) for name in set(_FIELD_NAME.findall(text)))


@functools.lru_cache(maxsize=4096)
def _judged(name: str) -> bool:
    return is_secret_name(name)


MIN_SCRUB = 8
"""Shorter values are not scrubbed by value: blanking every `k` in a row would destroy it."""


def is_secret_name(name: str) -> bool:
    """Whether a header, field or parameter called `name` holds a credential."""
    if name.lower() in NOT_SECRET:
        return False
    words = [w.lower() for w in _WORD.findall(name)]
    return bool(words) and (words[-1] in _LAST_WORDS or not _ANY_WORDS.isdisjoint(words))


def _secret_value(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


class Scrubber:
    """Secret values seen so far; `scrub` blanks them out of any text."""

    def __init__(self, values: Iterable[str] = ()):
        self.values: set[str] = set()
        self.add(*values)

    def add(self, *values: Any) -> None:
        for v in values:
            if isinstance(v, str):
                v = v.removeprefix("Bearer ").removeprefix("bearer ").strip()
                if len(v) >= MIN_SCRUB:
                    self.values.add(v)

    def scrub(self, text: str | None) -> str | None:
        if not text or not self.values:
            return text
        for v in self.values:
            if v in text:
                text = text.replace(v, REDACTED)
        return text


def redact_headers(headers: Mapping[str, str], found: Scrubber | None = None) -> dict[str, str]:
    out = {}
    for k, v in headers.items():
        if is_secret_name(k):
            out[k] = REDACTED
            if found is not None:
                found.add(v)
        else:
            out[k] = v
    return out


def redact_value(value: Any, found: Scrubber | None = None) -> tuple[Any, bool]:
    """`value` with every secret-named scalar replaced; and whether anything was."""
    if isinstance(value, dict):
        changed = False
        out = {}
        logprob_entry = "logprob" in value  # {"token": "h", "logprob": -0.5}: a token's text
        for k, v in value.items():
            secret = isinstance(k, str) and is_secret_name(k) and _secret_value(v)
            if secret and not (logprob_entry and k == "token"):
                out[k], changed = REDACTED, True
                if found is not None:
                    found.add(v)
            else:
                out[k], c = redact_value(v, found)
                changed |= c
        return out, changed
    if isinstance(value, list):
        items = [redact_value(v, found) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def redact_body(raw: str, parsed: Any = None, found: Scrubber | None = None) -> str:
    """The body text unchanged (byte-faithful) unless it carries a secret field, then re-encoded."""
    if not may_hold_secret(raw):
        return raw
    if parsed is None:
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):
            return redact_sse(raw, found)
    value, changed = redact_value(parsed, found)
    return json.dumps(value, ensure_ascii=False) if changed else raw


def redact_sse(text: str, found: Scrubber | None = None) -> str:
    """An SSE text with each event's JSON data redacted; other lines are kept as they are."""
    if not may_hold_secret(text):
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("data:") and may_hold_secret(line):
            try:
                data = json.loads(line[5:])
            except (ValueError, RecursionError):
                continue
            value, changed = redact_value(data, found)
            if changed:
                lines[i] = "data: " + json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return "\n".join(lines)


def redact_url(url: str, found: Scrubber | None = None) -> str:
    """A URL with secret-named query parameters (`?key=...`) redacted."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(is_secret_name(k) for k, _ in pairs):
        return url
    if found is not None:
        found.add(*(v for k, v in pairs if is_secret_name(k)))
    query = urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs])
    return urlunsplit(parts._replace(query=query))
