"""Optional API keys on the proxy's own routes, so it can listen beyond loopback.

With keys configured (`POMONA_PROXY_API_KEYS="name:key,..."`, `--api-key-file`, or
`ProxyConfig.api_keys`), opening, inspecting and closing episodes, the policy routes and the
model routes outside any episode need one of them, sent the way the SDKs send theirs:
`Authorization: Bearer KEY` or `x-api-key: KEY`. A per-episode base URL (`/e/KEY/...`) needs
none: its unguessable episode key is the credential a harness in a sandbox holds, and it reaches
nothing but that episode. Without keys every route is open, as on loopback.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

ENV = "POMONA_PROXY_API_KEYS"


def presented(headers: Mapping[str, str]) -> str | None:
    """The key a request carries, as a Bearer token or in x-api-key."""
    auth = headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key")


def allowed(keys: Mapping[str, str], headers: Mapping[str, str]) -> bool:
    """Whether the request may use a guarded route (always, when no keys are configured)."""
    if not keys:
        return True
    key = presented(headers)
    if not key:
        return False
    return any(hmac.compare_digest(key.encode(), k.encode()) for k in keys.values())
