"""The sandbox service over HTTP, side by side with the in-process SDK, with Orchard's methodology.

Rows: exec `true` p50/p90/p99 sequentially, in-process and through REST (`pomona serve` in its own
process on loopback, API key, SQLite store); then Orchard's run through the service: N sandboxes at once,
each create -> the four commands -> delete (reference/orchard.md §5), with success rate and
commands per second of wall time.

    .venv/bin/python perf/service_bench.py [--n 1000] [--seq 200] [--redis]

Prints one table; no assertion anywhere. Percentiles interpolate as Orchard's: k=(n-1)p/100.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf.sandbox_bench import COMMANDS, ms, pct  # noqa: E402
from pomona import AsyncSandboxClient  # noqa: E402
from tests.service.harness import KEYS, RedisServer, Replica, unmount  # noqa: E402


async def sequential_exec(client: AsyncSandboxClient, n: int) -> list[float]:
    async with await client.create_sandbox() as sb:
        for _ in range(10):
            await sb.exec("true")
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await sb.exec("true")
            times.append(time.perf_counter() - start)
        return times


async def orchard_run(client: AsyncSandboxClient, n: int) -> dict:
    creates, execs, errors, ok = [], [], [], 0

    async def one(i: int) -> None:
        nonlocal ok
        try:
            start = time.perf_counter()
            sb = await client.create_sandbox(labels={"bench": "service"})
            creates.append(time.perf_counter() - start)
            for command, login in COMMANDS:
                start = time.perf_counter()
                r = await sb.exec(command, login_shell=login, timeout=600)
                execs.append(time.perf_counter() - start)
                if r.exit_code != 0:
                    raise RuntimeError(f"{command!r} exited {r.exit_code}: {r.stderr[:200]}")
            await sb.delete()
            ok += 1
        except Exception as e:
            errors.append(repr(e)[:200])

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - start
    return {"creates": creates, "execs": execs, "ok": ok, "n": n, "wall": wall, "errors": errors[:3]}


def row(what: str, values: list[float], notes: str = "") -> str:
    return f"{what:<52}| {ms(pct(values, 50)):>8} | {ms(pct(values, 90)):>8} | {ms(pct(values, 99)):>8} | {notes}"


async def measure(url: str | None, state: str, n: int, seq: int) -> list[str]:
    label = "HTTP (REST, loopback)" if url else "in-process"
    client = AsyncSandboxClient(base_url=url, api_key=KEYS["alice"]) if url else \
        AsyncSandboxClient("local", state_dir=state)
    async with client:
        lines = [row(f"{label}: exec `true`, sequential x{seq}", await sequential_exec(client, seq))]
        if url:
            run = await orchard_run(client, n)
            rate = run["ok"] / run["n"] * 100
            lines.append(row(f"{label}: create, Orchard run N={n}", run["creates"],
                             f"{rate:.1f}% ok, {run['wall']:.1f} s wall"))
            lines.append(row(f"{label}: exec, 4 Orchard commands", run["execs"],
                             f"{len(run['execs']) / run['wall']:.0f} cmd/s {run['errors'] or ''}"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="sandboxes in the Orchard run")
    parser.add_argument("--seq", type=int, default=200, help="sequential execs for the latency rows")
    parser.add_argument("--redis", action="store_true", help="the service's store in a real Redis")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pomona-service-bench-"))
    redis = RedisServer().start() if args.redis else None
    lines = asyncio.run(measure(None, str(root / "inproc"), args.n, args.seq))
    unmount(root / "inproc")
    server = Replica(root / "http", redis.url if redis else None, max_creates=16, max_execs=256,
                     queue=5000).start()  # its own process, as `pomona serve` runs
    try:
        lines += asyncio.run(measure(server.url, "", args.n, args.seq))
    finally:
        server.stop()
        unmount(root / "http")
        if redis:
            redis.close()
    print(f"{'what':<52}| {'p50 ms':>8} | {'p90 ms':>8} | {'p99 ms':>8} | notes")
    print("-" * 110)
    print("\n".join(lines))
    print(row("Orchard Env (published): exec average", [0.28], "k8s; 1,000 sandboxes in 26 s"))


if __name__ == "__main__":
    main()
