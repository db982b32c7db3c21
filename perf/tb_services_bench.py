"""What reaching a Terminal-Bench sidecar service costs: HTTP requests to the ticket service of
the `ticket-triage` task, from the agent's sandbox through Pomona's relay (the address a compose
network would give, `api:8080`), beside the same requests made inside the service's own sandbox
(its loopback: no relay at all), and the time to bring the service up.

    python perf/tb_services_bench.py [--requests 200] [--rounds 3]

Each round starts the service (a sandbox of its own, its files copied in, its healthcheck
passed) and the relay in an agent sandbox, then times `--requests` sequential GET /tickets, each
on a new connection, with a Python client inside the sandbox (so both sides pay the same client
cost). Docker Compose's own network, what a user of harbor gets, needs the Compose v2 plugin,
which this machine lacks, so it is not measured here. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from pomona import SandboxClient
from pomona.benchmarks import terminal_bench as tb
from pomona.benchmarks.terminal_bench.services import ServiceGroup
from pomona.orchestrator.runtimes.local import LocalRuntime

CLIENT = """
import statistics, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(n):
    t0 = time.perf_counter()
    urllib.request.urlopen(url, timeout=60).read()
    times.append(time.perf_counter() - t0)
times.sort()
print(statistics.median(times) * 1e3, times[int(len(times) * 0.9)] * 1e3, sum(times))
"""


def timed(sandbox, url: str, n: int) -> tuple[float, float, float]:
    sandbox.write_file("/tmp/client.py", CLIENT)
    done = sandbox.exec(f"python3 /tmp/client.py {url} {n}", timeout=600)
    if done.exit_code != 0:
        raise RuntimeError(done.stderr)
    p50, p90, total = map(float, done.stdout.split())
    return p50, p90, n / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    task = tb.load_task(tb.DATA / "extras" / "ticket-triage")
    rows: dict[str, list[tuple[float, float, float]]] = {"relay": [], "loopback": []}
    startup = []
    with (
        tempfile.TemporaryDirectory(prefix="pomona-perf-") as state,
        SandboxClient(state_dir=state) as client,
    ):
        for _ in range(args.rounds):
            with client.create_sandbox("host", network="none", timeout=3600) as agent:
                t0 = time.perf_counter()
                group = ServiceGroup.start(task.services, client, 3600, {"perf": "tb"})
                try:
                    group.attach(agent, owner=True)
                    startup.append(time.perf_counter() - t0)
                    rows["relay"].append(timed(agent, "http://api:8080/tickets", args.requests))
                    rows["loopback"].append(
                        timed(
                            group.sandbox_of("api"), "http://127.0.0.1:8080/tickets", args.requests
                        )
                    )
                finally:
                    group.close()
        client.close()
        LocalRuntime(state).unmount_store()
    print(
        f"service start (sandbox, files, healthcheck) and relay: "
        f"median {statistics.median(startup):.2f} s over {args.rounds} rounds"
    )
    print(
        f"{'path':<10} {'p50 ms':>8} {'p90 ms':>8} {'req/s':>8}   ({args.requests} requests, "
        f"a new connection each, medians over {args.rounds} rounds)"
    )
    for name, runs in rows.items():
        p50, p90, rate = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{name:<10} {p50:>8.2f} {p90:>8.2f} {rate:>8.1f}")


if __name__ == "__main__":
    main()
