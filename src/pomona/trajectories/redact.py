"""Keep secrets off disk: API keys and auth headers are replaced before anything is written."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
    }
)
SECRET_FIELDS = frozenset(
    {"api_key", "apikey", "api-key", "authorization", "x-api-key", "access_token", "secret"}
)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: REDACTED if k.lower() in SECRET_HEADERS else v for k, v in headers.items()}


def _redact(value: Any) -> tuple[Any, bool]:
    if isinstance(value, dict):
        changed = False
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in SECRET_FIELDS:
                out[k], changed = REDACTED, True
            else:
                out[k], c = _redact(v)
                changed |= c
        return out, changed
    if isinstance(value, list):
        items = [_redact(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def redact_body(raw: str, parsed: Any = None) -> str:
    """The body text unchanged (byte-faithful) unless it carries a secret field, then re-encoded."""
    lowered = raw.lower()
    if not any(f'"{f}"' in lowered for f in SECRET_FIELDS):
        return raw
    if parsed is None:
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
    value, changed = _redact(parsed)
    return json.dumps(value, ensure_ascii=False) if changed else raw
