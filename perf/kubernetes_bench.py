"""What the kubernetes runtime itself costs, measured where it can be measured here.

No control plane runs on this machine, so cluster figures (scheduling, image pulls, the API
server and kubelet on the exec path) cannot be taken here. Two things can:
1. the in-pod gate: `true` run directly vs through the gate script (busybox, as in a pod);
2. the runtime's own client path against the STAND-IN API server and kubelet of
   tests/kubernetes/standin.py (official client, real exec WebSocket protocol, pods as Docker
   containers), side by side with the docker runtime on the same engine: the difference is the
   client, the protocol and the gate, not a real cluster's latency.

    .venv/bin/python perf/kubernetes_bench.py [--n 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pomona import SandboxClient  # noqa: E402
from pomona.orchestrator.runtimes.kubernetes import gate  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def row(what: str, samples: list[float], note: str = "") -> str:
    ms = [s * 1000 for s in samples]
    return f"{what:<58} | {pct(ms, 50):8.1f} | {pct(ms, 90):8.1f} | {pct(ms, 99):8.1f} | {note}"


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def gate_rows(n: int) -> list[str]:
    run_dir = Path(tempfile.mkdtemp(prefix="gate-bench-"))
    (run_dir / "x").mkdir()
    script = gate.EXEC.replace(gate.RUN_DIR, str(run_dir))
    direct = timed(lambda: subprocess.run(["/bin/busybox", "true"], check=True), n)
    through = timed(
        lambda: subprocess.run(
            gate.exec_argv(
                "bench",
                1000,
                "/tmp",
                None,
                ["/bin/busybox", "true"],
                busybox="/bin/busybox",
                script=script,
            ),
            check=True,
        ),
        n,
    )
    return [
        row(f"`true` directly (x{n})", direct),
        row(f"`true` through the in-pod gate (x{n})", through, "setsid, uid drop, FIFOs, drain"),
    ]


def client_rows(n: int) -> list[str]:
    from kubernetes import client

    from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
    from tests.images import debian_image
    from tests.kubernetes import standin

    image, gate_image = debian_image(), standin.gate_image()
    rows = []
    with standin.running("bench") as (url, _), tempfile.TemporaryDirectory() as snapshots:
        runtime = KubernetesRuntime(
            api=client.ApiClient(client.Configuration(host=url)),
            owner="bench",
            namespace="bench",
            gate_image=gate_image,
            snapshot_store=snapshots,
            image_pull_policy="Never",
        )
        with (
            SandboxClient(runtime) as k8s,
            SandboxClient("docker", state_dir=tempfile.mkdtemp()) as dock,
        ):
            for name, c in (("stand-in kubernetes", k8s), ("docker runtime", dock)):
                creates, sandboxes = [], []
                for _ in range(5):
                    start = time.perf_counter()
                    sandboxes.append(c.create_sandbox(image))
                    creates.append(time.perf_counter() - start)
                sb = sandboxes[0]
                rows.append(
                    row(
                        f"{name}: create-to-ready, sequential x5",
                        creates,
                        "init container + gate" if name.startswith("stand") else "",
                    )
                )
                rows.append(
                    row(
                        f"{name}: exec `true`, sequential x{n}",
                        timed(lambda sb=sb: sb.exec("true"), n),
                    )
                )
                rows.append(
                    row(
                        f"{name}: write+read 1 MiB file x20",
                        timed(
                            lambda sb=sb: sb.read_file(
                                sb.write_file("f.bin", os.urandom(2**20)) or "f.bin"
                            ),
                            20,
                        ),
                    )
                )
                for s in sandboxes:
                    s.delete()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"{'what':<58} | {'p50 ms':>8} | {'p90 ms':>8} | {'p99 ms':>8} | notes")
    for line in gate_rows(args.n) + client_rows(args.n):
        print(line, flush=True)


if __name__ == "__main__":
    main()
