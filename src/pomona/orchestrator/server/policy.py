"""What the operator lets tenants ask of the host, and how much of the service one key may hold
(its quota, quotas.py: live sandboxes, their CPU and memory, the longest TTL).

Host paths are an operator decision: a mount with a host path is accepted from admin keys, and
from tenants only under a directory allowed at start (`--mount-source`); named sources (the
harness payload, "tools") are resolved by the server itself. File operations are bounded per
key, so one tenant cannot occupy every worker of the service.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from pomona.errors import Overloaded, SourceNotAllowed
from pomona.orchestrator.server.coordinator import Principal
from pomona.orchestrator.server.quotas import Quota
from pomona.orchestrator.types import SandboxSpec

FILE_OPS_PER_KEY = 8
DEFAULT_QUOTA = Quota()


@dataclass
class TenantPolicy:
    mount_sources: tuple[str, ...] = ()
    file_ops_per_key: int = FILE_OPS_PER_KEY
    quota: Quota | None = field(default_factory=Quota)  # a tenant key's, unless in `quotas`
    quotas: dict[str, Quota] = field(default_factory=dict)
    _file_ops: dict[str, asyncio.Semaphore] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        mount_sources: list[str] | None = None,
        file_ops_per_key: int = FILE_OPS_PER_KEY,
        quota: Quota | None = DEFAULT_QUOTA,
        quotas: dict[str, Quota] | None = None,
    ) -> TenantPolicy:
        """`quota=None`: tenant keys have none (only those in `quotas` do)."""
        return cls(
            tuple(os.path.realpath(d) for d in mount_sources or ()),
            file_ops_per_key,
            quota,
            dict(quotas or {}),
        )

    def quota_for(self, who: Principal) -> Quota | None:
        """The key's quota; admin keys have none."""
        return None if who.admin else self.quotas.get(who.name, self.quota)

    def check_spec(self, who: Principal, spec: SandboxSpec) -> None:
        """Refuse host paths this caller may not mount; the answer never says if a path exists."""
        for mount in spec.mounts:
            if mount.named or who.admin:
                continue
            real = os.path.realpath(mount.source)
            if not any(
                real == d or real.startswith(d.rstrip("/") + "/") for d in self.mount_sources
            ):
                raise SourceNotAllowed(
                    f"mount source {mount.source!r}: host paths are mounted only for admin keys or "
                    "under the directories the operator allowed (pomona serve --mount-source); "
                    'the harness payload is mounted by name: {"source": "tools", ...}'
                )

    @asynccontextmanager
    async def file_slot(self, who: Principal) -> AsyncIterator[None]:
        """One of the key's file-operation slots, or 503 at once when all are taken."""
        slots = self._file_ops.setdefault(who.name, asyncio.Semaphore(self.file_ops_per_key))
        if slots.locked():
            raise Overloaded(
                f"{self.file_ops_per_key} file operations of this key are running; "
                "retry after the Retry-After delay"
            )
        async with slots:
            yield
