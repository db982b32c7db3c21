"""Latency the recording proxy adds, against calling the upstream directly and against LiteLLM's
own proxy server doing the same work. One run, one table of medians and ratios.

    .venv/bin/python perf/proxy_bench.py [--calls 300] [--load 2000] [--litellm PATH]

Every server runs in its own process, as a user would run it: the upstream is the scripted model
served standalone (`python -m pomona.proxy --no-record`), the proxy passes through to it over
HTTP and records every call. `--litellm` names the `litellm` CLI from an install of
`litellm[proxy]` (default: the one on PATH, then .venv/bin/litellm); if it cannot start here,
the table says so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from pomona import trajectories

BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
BODY = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "tools": [BASH]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            httpx.get(url, timeout=1)
            return True
        except httpx.HTTPError:
            time.sleep(0.1)
    return False


def serve(argv: list[str], health: str, log: Path, timeout: float = 60, env: dict | None = None) -> subprocess.Popen | None:
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    if wait_up(health, proc, timeout):
        return proc
    proc.kill()
    proc.wait()
    return None


def latencies(client: httpx.Client, url: str, body: dict, n: int, stream: bool) -> list[float]:
    """Per-call ms: whole call when not streaming, time to first byte when streaming."""
    out = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        if stream:
            with client.stream("POST", url, json={**body, "stream": True}) as r:
                chunks = r.iter_raw()
                next(chunks)
                t = time.perf_counter() - t0
                for _ in chunks:
                    pass
        else:
            r = client.post(url, json=body)
            t = time.perf_counter() - t0
        r.raise_for_status()
        if i >= 20:  # warm-up calls are not counted
            out.append(t * 1000)
    return out


async def throughput(url: str, body: dict, total: int, concurrency: int = 32) -> float:
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:
        left = iter(range(total))

        async def worker():
            for _ in left:
                (await client.post(url, json=body)).raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return total / (time.perf_counter() - t0)


def find_litellm(explicit: str | None) -> str | None:
    for cand in (explicit, shutil.which("litellm"), str(Path(sys.executable).parent / "litellm")):
        if cand and Path(cand).exists():
            return cand
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="sequential calls per latency row")
    ap.add_argument("--load", type=int, default=2000, help="calls for the recorded-calls/s row")
    ap.add_argument("--litellm", help="path of the `litellm` CLI (from litellm[proxy])")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pomona-bench-"))
    (work / "script.txt").write_text("echo hello > out.txt\n")
    py = [sys.executable, "-m", "pomona.proxy"]
    procs: list[subprocess.Popen] = []
    rows: list[tuple[str, str, float | None, str]] = []
    try:
        up_port = free_port()
        up = serve([*py, "--port", str(up_port), "--no-record", "--script", str(work / "script.txt")], f"http://127.0.0.1:{up_port}/healthz", work / "upstream.log")
        assert up, "the scripted upstream did not start"
        procs.append(up)
        upstream = f"http://127.0.0.1:{up_port}/v1"
        config = work / "models.yaml"
        config.write_text(f"model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/scripted\n      api_base: {upstream}\n      api_key: sk-bench\n")
        px_port = free_port()
        px = serve([*py, "--port", str(px_port), "--config", str(config), "--trajectories", str(work / "runs")], f"http://127.0.0.1:{px_port}/healthz", work / "proxy.log")
        assert px, "the pomona proxy did not start"
        procs.append(px)
        key = httpx.post(f"http://127.0.0.1:{px_port}/episodes", json={}).json()["key"]
        pomona_url = f"http://127.0.0.1:{px_port}/e/{key}/v1/chat/completions"

        litellm_url, litellm_note = None, ""
        cli = find_litellm(args.litellm)
        if cli is None:
            litellm_note = "litellm CLI not found (install litellm[proxy])"
        else:
            ll_port = free_port()
            ll = serve([cli, "--config", str(config), "--port", str(ll_port), "--num_workers", "1"], f"http://127.0.0.1:{ll_port}/health/liveliness", work / "litellm.log", timeout=120, env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"})
            if ll is None:
                tail = (work / "litellm.log").read_text().strip().splitlines()[-1:] or ["no output"]
                litellm_note = f"`litellm --config` did not start here: {tail[0][:90]}"
            else:
                procs.append(ll)
                litellm_url = f"http://127.0.0.1:{ll_port}/v1/chat/completions"

        with httpx.Client(limits=httpx.Limits(max_keepalive_connections=4)) as client:
            for stream, what in ((False, "non-streaming call"), (True, "streaming TTFB")):
                direct = statistics.median(latencies(client, f"{upstream}/chat/completions", {**BODY, "model": "scripted"}, args.calls, stream))
                rows.append((what, "upstream directly", direct, ""))
                pomona = statistics.median(latencies(client, pomona_url, BODY, args.calls, stream))
                rows.append((what, "pomona proxy (recording)", pomona, f"+{pomona - direct:.2f} ms, x{pomona / direct:.2f}"))
                if litellm_url:
                    ll = statistics.median(latencies(client, litellm_url, BODY, args.calls, stream))
                    rows.append((what, "litellm proxy", ll, f"+{ll - direct:.2f} ms, x{ll / direct:.2f}; pomona is x{ll / pomona:.1f} faster"))
                else:
                    rows.append((what, "litellm proxy", None, litellm_note))
        before = trajectories.read(work / "runs").num_rows
        scripted_key = httpx.post(f"http://127.0.0.1:{px_port}/episodes", json={"model": "scripted", "script": []}).json()["key"]
        rate_builtin = asyncio.run(throughput(f"http://127.0.0.1:{px_port}/e/{scripted_key}/v1/chat/completions", BODY, args.load))
        rate_pass = asyncio.run(throughput(pomona_url, BODY, args.load))
        recorded = trajectories.read(work / "runs").num_rows - before
        rows.append(("recorded calls/s", "pomona, built-in scripted model", rate_builtin, "32 concurrent clients"))
        rows.append(("recorded calls/s", "pomona, pass-through hop", rate_pass, f"{recorded} of {2 * args.load} calls recorded"))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    print(f"\nproxy_bench: {args.calls} sequential calls per latency row (medians), {os.cpu_count()} CPUs\n")
    print(f"| {'measure':<19} | {'path':<32} | {'median':>12} | {'vs direct':<48} |")
    print(f"|{'-' * 21}|{'-' * 34}|{'-' * 14}|{'-' * 50}|")
    for what, path, value, note in rows:
        unit = "calls/s" if what.startswith("recorded") else "ms"
        shown = "n/a" if value is None else f"{value:,.0f} {unit}" if unit == "calls/s" else f"{value:.2f} {unit}"
        print(f"| {what:<19} | {path:<32} | {shown:>12} | {note:<48} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
