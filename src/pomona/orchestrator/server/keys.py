"""API keys: who is calling. `POMONA_API_KEYS` names the keys; admins see every sandbox."""

from __future__ import annotations

import hmac

from pomona.errors import AuthenticationRequired, PermissionDenied
from pomona.orchestrator.server.coordinator import Principal


class KeyRing:
    """Checks X-API-Key in constant time against every key; None disables auth (loopback only)."""

    def __init__(
        self, keys: dict[str, str] | None, admins: set[str] | frozenset[str] = frozenset({"admin"})
    ):
        self.keys = {n: k.encode() for n, k in keys.items()} if keys is not None else None
        self.admins = admins

    def check(self, presented: str | None) -> Principal:
        if self.keys is None:
            return Principal("anonymous", admin=True)
        if not presented:
            raise AuthenticationRequired("send your API key in the X-API-Key header")
        found = None
        for name, key in self.keys.items():  # no early exit: timing says nothing about which key
            if hmac.compare_digest(key, presented.encode()):
                found = name
        if found is None:
            raise PermissionDenied("the X-API-Key is not a key this service knows")
        return Principal(found, found in self.admins)
