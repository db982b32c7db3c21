"""Latency and CPU the recording proxy adds, against calling the upstream directly and against
LiteLLM's own proxy server doing the same work. One run, one table of medians and ratios.

    .venv/bin/python perf/proxy_bench.py [--calls 300] [--load 2000] [--delay 0.1] [--litellm PATH]

Rows: sequential latency (whole call, streaming time to first byte), the cross-dialect hop (an
Anthropic client served by a chat upstream, translated by LiteLLM inside the proxy), calls/s,
CPU time per call of each server process (from /proc), and p50 latency at concurrency 10
against an upstream that takes `--delay` seconds per answer (a model's generation time; real
ones take longer), side by side with calling that upstream directly.

Every server runs in its own process, as a user would run it: the upstream is the scripted model
served standalone (`python -m pomona.proxy --no-record`), the proxy passes through to it over
HTTP and records every call. `--litellm` names the `litellm` CLI from an install of
`litellm[proxy]` (default: the venv perf/litellm_proxy_venv.sh builds and caches); if it cannot start here,
the table says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from pomona import trajectories

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
BODY = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "tools": [BASH]}
ANTHROPIC_BODY = {
    "model": "bench",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "go"}],
    "tools": [{"name": "bash", "input_schema": BASH["function"]["parameters"]}],
}
DELAYED_UPSTREAM = """
import sys, threading
from pomona.proxy.testing import FakeUpstream
up = FakeUpstream("chat", delay=float(sys.argv[2]))
up.port = int(sys.argv[1])
up.start()
threading.Event().wait()
"""


LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",  # a local bench, no auth
}


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


def serve(
    argv: list[str], health: str, log: Path, timeout: float = 60, env: dict | None = None
) -> subprocess.Popen | None:
    proc = subprocess.Popen(
        argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    if wait_up(health, proc, timeout):
        return proc
    proc.kill()
    proc.wait()
    return None


class RawClient:
    """A minimal keep-alive HTTP/1.1 client over one socket, so the client's own cost (httpx
    spends milliseconds per streamed call) does not hide the servers'. Like wrk, but in Python."""

    def __init__(self, url: str, body: dict):
        u = httpx.URL(url)
        payload = json.dumps(body).encode()
        head = f"POST {u.raw_path.decode()} HTTP/1.1\r\nHost: {u.host}:{u.port}\r\nContent-Type: application/json\r\n"
        self.request = f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
        self.sock = socket.create_connection((u.host, u.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self) -> tuple[float, float]:
        """(time to the first response byte, time to the whole response), in ms."""
        t0 = time.perf_counter()
        self.sock.sendall(self.request)
        data = self.sock.recv(65536)
        first = time.perf_counter()
        while not self._complete(data):
            more = self.sock.recv(65536)
            if not more:
                raise ConnectionError("the server closed the connection")
            data += more
        if not data.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(data[:300].decode(errors="replace"))
        return (first - t0) * 1000, (time.perf_counter() - t0) * 1000

    @staticmethod
    def _complete(data: bytes) -> bool:
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            return False
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if m:
            return len(body) >= int(m.group(1))
        return body.endswith(b"0\r\n\r\n")  # chunked: the last chunk has arrived

    def close(self) -> None:
        self.sock.close()


def median_ms(url: str, body: dict, n: int, stream: bool) -> float:
    """Per-call ms: whole call when not streaming, time to first byte when streaming."""
    client = RawClient(url, {**body, "stream": stream})
    try:
        samples = [client.call() for _ in range(n + 20)][20:]  # warm-up calls are not counted
    finally:
        client.close()
    return statistics.median(first if stream else whole for first, whole in samples)


CONCURRENCY = 16


def cpu_seconds(proc: subprocess.Popen) -> float:
    """User + system CPU time the process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latencies(url: str, body: dict, total: int, concurrency: int) -> list[float]:
    """Per-call ms of `total` non-streaming calls over `concurrency` keep-alive connections."""
    request = RawClient(url, body)
    request.close()
    u = httpx.URL(url)
    left = iter(range(total))
    out: list[float] = []

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(u.host, u.port)
        for _ in left:
            t0 = time.perf_counter()
            writer.write(request.request)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.decode(errors="replace"))
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            out.append((time.perf_counter() - t0) * 1000)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


async def throughput(url: str, body: dict, total: int, concurrency: int = CONCURRENCY) -> float:
    """Calls per second with `concurrency` keep-alive connections, non-streaming."""
    request = RawClient(url, body)
    request.close()
    u = httpx.URL(url)
    left = iter(range(total))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(u.host, u.port)
        for _ in left:
            writer.write(request.request)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.decode(errors="replace"))
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - t0)


def find_litellm(explicit: str | None) -> str | None:
    """The given CLI, else LiteLLM's proxy built (once, cached) by perf/litellm_proxy_venv.sh."""
    for cand in (explicit, os.environ.get("POMONA_LITELLM")):
        if cand and Path(cand).exists():
            return cand
    built = subprocess.run(
        ["bash", str(Path(__file__).with_name("litellm_proxy_venv.sh"))],
        capture_output=True,
        text=True,
    )
    return built.stdout.strip() or None if built.returncode == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="sequential calls per latency row")
    ap.add_argument("--load", type=int, default=2000, help="calls for the recorded-calls/s row")
    ap.add_argument("--litellm", help="path of the `litellm` CLI (from litellm[proxy])")
    ap.add_argument(
        "--delay",
        type=float,
        default=0.1,
        help="seconds the delayed upstream takes per answer (concurrency-10 rows)",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pomona-bench-"))
    (work / "script.txt").write_text("echo hello > out.txt\n")
    py = [sys.executable, "-m", "pomona.proxy"]
    procs: list[subprocess.Popen] = []
    rows: list[tuple[str, str, float | None, str]] = []
    try:
        up_port = free_port()
        up = serve(
            [*py, "--port", str(up_port), "--no-record", "--script", str(work / "script.txt")],
            f"http://127.0.0.1:{up_port}/healthz",
            work / "upstream.log",
        )
        assert up, "the scripted upstream did not start"
        procs.append(up)
        upstream = f"http://127.0.0.1:{up_port}/v1"
        config = work / "models.yaml"
        slow_port = free_port()
        slow = serve(
            [sys.executable, "-c", DELAYED_UPSTREAM, str(slow_port), str(args.delay)],
            f"http://127.0.0.1:{slow_port}/v1/chat/completions",
            work / "slow-upstream.log",
        )
        assert slow, "the delayed upstream did not start"
        procs.append(slow)
        config.write_text(
            f"model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/scripted\n      api_base: {upstream}\n      api_key: sk-bench\n"
            f"  - model_name: slow\n    litellm_params:\n      model: hosted_vllm/slow\n      api_base: http://127.0.0.1:{slow_port}/v1\n      api_key: sk-bench\n"
        )
        px_port = free_port()
        px = serve(
            [
                *py,
                "--port",
                str(px_port),
                "--config",
                str(config),
                "--trajectories",
                str(work / "runs"),
            ],
            f"http://127.0.0.1:{px_port}/healthz",
            work / "proxy.log",
        )
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
            ll = serve(
                [cli, "--config", str(config), "--port", str(ll_port), "--num_workers", "1"],
                f"http://127.0.0.1:{ll_port}/health/liveliness",
                work / "litellm.log",
                timeout=120,
                env=LITELLM_ENV,
            )
            if ll is None:
                tail = (work / "litellm.log").read_text().strip().splitlines()[-1:] or ["no output"]
                litellm_note = f"`litellm --config` did not start here: {tail[0][:90]}"
            else:
                procs.append(ll)
                litellm_url = f"http://127.0.0.1:{ll_port}/v1/chat/completions"

        for stream, what in ((False, "non-streaming call"), (True, "streaming TTFB")):
            direct = median_ms(
                f"{upstream}/chat/completions", {**BODY, "model": "scripted"}, args.calls, stream
            )
            rows.append((what, "upstream directly", direct, ""))
            pomona = median_ms(pomona_url, BODY, args.calls, stream)
            rows.append(
                (
                    what,
                    "pomona proxy (recording)",
                    pomona,
                    f"+{pomona - direct:.2f} ms (x{pomona / direct:.2f})",
                )
            )
            if litellm_url:
                ll = median_ms(litellm_url, BODY, args.calls, stream)
                note = f"+{ll - direct:.2f} ms (x{ll / direct:.2f}); pomona adds x{(ll - direct) / (pomona - direct):.0f} less"
                rows.append((what, "litellm proxy (not recording)", ll, note))
            else:
                rows.append((what, "litellm proxy", None, litellm_note))
        anthropic_url = f"http://127.0.0.1:{px_port}/e/{key}/v1/messages"
        median_ms(anthropic_url, ANTHROPIC_BODY, 5, False)  # imports LiteLLM, off the clock
        hop = median_ms(anthropic_url, ANTHROPIC_BODY, args.calls, False)
        chat_direct = next(v for w, p, v, _ in rows if p == "upstream directly")
        rows.append(("cross-dialect hop", "pomona: anthropic -> chat (LiteLLM)", hop,
                     f"+{hop - chat_direct:.2f} ms over the chat upstream directly"))  # fmt: skip
        if litellm_url:
            ll_hop = median_ms(litellm_url.replace("/chat/completions", "/messages"),
                               ANTHROPIC_BODY, args.calls, False)  # fmt: skip
            rows.append(("cross-dialect hop", "litellm proxy: anthropic -> chat", ll_hop,
                         f"+{ll_hop - chat_direct:.2f} ms"))  # fmt: skip
        before = trajectories.read(work / "runs").num_rows
        scripted_key = httpx.post(
            f"http://127.0.0.1:{px_port}/episodes", json={"model": "scripted"}
        ).json()["key"]
        builtin_url = f"http://127.0.0.1:{px_port}/e/{scripted_key}/v1/chat/completions"
        cpu0 = cpu_seconds(px)
        rate_builtin = asyncio.run(throughput(builtin_url, BODY, args.load))
        cpu_builtin = (cpu_seconds(px) - cpu0) / args.load * 1000
        cpu0, up0 = cpu_seconds(px), cpu_seconds(up)
        rate_pass = asyncio.run(throughput(pomona_url, BODY, args.load))
        cpu_pass = (cpu_seconds(px) - cpu0) / args.load * 1000
        cpu_up = (cpu_seconds(up) - up0) / args.load * 1000
        hops = max(50, args.load // 10)
        cpu0 = cpu_seconds(px)
        asyncio.run(throughput(anthropic_url, ANTHROPIC_BODY, hops))
        cpu_hop = (cpu_seconds(px) - cpu0) / hops * 1000
        recorded = trajectories.read(work / "runs").num_rows - before
        rows.append(
            (
                "calls/s",
                "pomona, built-in scripted model",
                rate_builtin,
                f"recorded; {CONCURRENCY} connections",
            )
        )
        rows.append(
            (
                "calls/s",
                "pomona, pass-through hop",
                rate_pass,
                f"{recorded} of {2 * args.load + hops} calls recorded",
            )
        )
        rows.append(("CPU ms per call", "upstream (scripted model)", cpu_up, "for scale"))
        rows.append(("CPU ms per call", "pomona, built-in scripted model", cpu_builtin, "recorded"))
        rows.append(("CPU ms per call", "pomona, pass-through hop", cpu_pass, "recorded"))
        rows.append(
            ("CPU ms per call", "pomona, anthropic -> chat hop", cpu_hop, "recorded, LiteLLM")
        )
        if litellm_url:
            ll_proc = procs[-1]
            cpu0 = cpu_seconds(ll_proc)
            rate_ll = asyncio.run(throughput(litellm_url, BODY, args.load))
            cpu_ll = (cpu_seconds(ll_proc) - cpu0) / args.load * 1000
            rows.append(("calls/s", "litellm proxy, same hop", rate_ll, "not recording"))
            rows.append(
                ("CPU ms per call", "litellm proxy, pass-through hop", cpu_ll, "not recording")
            )
        slow_body = {**BODY, "model": "slow"}
        n10 = max(100, args.calls)
        direct10 = statistics.median(asyncio.run(latencies(
            f"http://127.0.0.1:{slow_port}/v1/chat/completions", slow_body, n10, 10)))  # fmt: skip
        proxied10 = statistics.median(asyncio.run(latencies(pomona_url, slow_body, n10, 10)))
        rows.append(
            ("p50, concurrency 10", f"upstream directly ({args.delay:g} s answers)", direct10, "")
        )
        rows.append(("p50, concurrency 10", "pomona pass-through (recording)", proxied10,
                     f"x{proxied10 / direct10:.3f} of direct"))  # fmt: skip
    finally:
        for p in procs:
            p.kill()
            p.wait()
    print(
        f"\nproxy_bench: {args.calls} sequential calls per latency row (medians), {os.cpu_count()} CPUs\n"
    )
    print(f"| {'measure':<19} | {'path':<32} | {'median':>14} | {'vs direct':<48} |")
    print(f"|{'-' * 21}|{'-' * 34}|{'-' * 16}|{'-' * 50}|")
    for what, path, value, note in rows:
        unit = "calls/s" if what == "calls/s" else "ms"
        shown = (
            "n/a"
            if value is None
            else f"{value:,.0f} {unit}"
            if unit == "calls/s"
            else f"{value:.2f} {unit}"
        )
        print(f"| {what:<19} | {path:<32} | {shown:>14} | {note:<48} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
