"""What a per-key quota costs a create: the store's claim of a lease with the quota checked in
the same atomic step (server/quotas.py) beside the plain claim, as one key's live sandboxes
grow, on SQLite and Redis (where both go through one script: the quota's maxima are empty). Run: .venv/bin/python perf/quota_bench.py [--n 2000]"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pomona.orchestrator.server.quotas import Quota
from pomona.orchestrator.server.store import RedisStore, SandboxRecord, SqliteStore, Store
from pomona.orchestrator.types import Limits, SandboxSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.service.harness: Redis
SPEC = SandboxSpec(limits=Limits(cpu=1, memory=2**30))


async def claims(store: Store, quota: Quota | None, n: int, tag: str) -> list[float]:
    """Milliseconds per claim of n leases for one owner."""
    times = []
    for i in range(n):
        lease = SandboxRecord(
            id=f"{tag}-{i}", owner=tag, spec=SPEC, replica="r", created_at=0, heartbeat_at=0
        )
        start = time.perf_counter()
        await store.claim_sandbox(lease, quota)
        times.append((time.perf_counter() - start) * 1000)
    return times


def row(name: str, times: list[float]) -> str:
    tail = times[len(times) * 9 // 10 :]  # the last tenth: with the most live sandboxes
    return (
        f"| {name} | {statistics.median(times):.3f} | {statistics.median(tail):.3f} "
        f"| {sorted(times)[int(len(times) * 0.99)]:.3f} |"
    )


async def bench(store: Store, label: str, n: int) -> None:
    quota = Quota(sandboxes=n + 1, cpu=float(n + 1), memory=(n + 1) * 2**30, ttl=None)
    await claims(store, None, 200, f"{label}-warm")  # connection, script cache, page cache
    for name, q in (("plain claim", None), ("claim + quota", quota)):
        print(row(f"{label}: {name}", await claims(store, q, n, f"{label}-{name[:5]}")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="leases claimed by one key")
    args = parser.parse_args()
    print(f"{args.n} claims by one key, ms per claim")
    print("| store | p50 | p50 of the last tenth | p99 |\n|---|---|---|---|")
    state = Path(tempfile.mkdtemp(prefix="quota-bench-"))
    sqlite = SqliteStore(state / "store.db")
    asyncio.run(bench(sqlite, "sqlite", args.n))
    asyncio.run(sqlite.close())
    from tests.service.harness import RedisServer

    server = RedisServer().start()
    try:

        async def redis() -> None:
            store = RedisStore(server.url)
            try:
                await bench(store, "redis", args.n)
            finally:
                await store.close()

        asyncio.run(redis())
    finally:
        server.close()


if __name__ == "__main__":
    main()
