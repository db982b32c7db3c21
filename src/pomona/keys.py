"""API key lists as both services take them (`pomona serve`'s POMONA_API_KEYS, the proxy's
POMONA_PROXY_API_KEYS): `name:key` entries separated by commas, spaces or newlines."""

from __future__ import annotations

from pomona.errors import UsageError


def parse_keys(text: str | None, source: str) -> dict[str, str]:
    """{name: key} from `text`; a malformed entry is refused naming `source`, never echoed whole."""
    keys: dict[str, str] = {}
    for entry in (text or "").replace(",", " ").split():
        name, sep, key = entry.partition(":")
        if not sep or not name or not key:
            raise UsageError(f"{source} entry {entry[:4]}... is not name:key")
        keys[name] = key
    return keys
