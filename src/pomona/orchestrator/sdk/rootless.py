"""The Service contract for an ordinary user's local runtime: its worker, over loopback HTTP.

The SDK uses this when SandboxClient("local") runs as an ordinary user (runtimes/local/rootless.py says why
the runtime runs in a worker there): the same operations as in-process, through the REST API
the worker serves with a key only this client holds. The worker starts with the client and
stops with it; the sandboxes do not.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pomona.orchestrator.runtimes.local.rootless import Worker
from pomona.orchestrator.sdk.remote import RemoteService


def default_state_dir() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "pomona"


class RootlessService(RemoteService):
    def __init__(self, state_dir: str | os.PathLike[str] | None = None):
        super().__init__("http://127.0.0.1")  # the worker's address, known once it runs
        self.worker = Worker(Path(state_dir or default_state_dir()).absolute())

    async def start(self) -> None:
        if self._client is None:
            await asyncio.to_thread(self.worker.start)
            self.base_url, self.api_key = self.worker.url, self.worker.key
        await super().start()

    async def close(self) -> None:
        await super().close()
        await asyncio.to_thread(self.worker.stop)
