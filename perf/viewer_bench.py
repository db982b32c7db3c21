"""How fast `pomona view` answers on a large store, against what a user would do instead (load the
tables with pandas, or run `pomona leaderboard`). One run, one table.

    .venv/bin/python perf/viewer_bench.py [--episodes 10000] [--calls-per-episode 10] [--dir D]

The store is synthetic and made by this script (kept in --dir for later runs): 20 runs of
benchmark × harness × model, 100 tasks × 5 attempts each, 5 % infra failures, and per episode
`--calls-per-episode` calls in the harness's own dialect whose conversation grows turn by turn
(system prompt, instruction, then a tool call and its result per turn), written one record
batch per call as the proxy writes them. The viewer runs in its own process (`pomona view`),
as a user starts it; every page is fetched over HTTP, cold once and then 5 times warm (median).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from pomona import trajectories
from pomona.benchmarks import leaderboard
from pomona.trajectories.schema import CALLS, EPISODES

BENCHMARKS = ("swe-local", "terminal-bench-local", "files", "text")
HARNESSES = (("pi", "chat"), ("codex", "responses"), ("claude-code", "anthropic"),
             ("opencode", "chat"), ("hermes", "chat"))  # fmt: skip
MODELS = ("oracle", "qwen3-32b", "gpt-oss-120b", "claude-sonnet")
KINDS = ("sandbox", "harness", "upstream", "timeout", "verifier")
LONG = "ep00x00000"
STORE_FORMAT = 2  # bump when the synthetic rows change, so a kept store is made anew
SYSTEM = "You are a coding agent working in a sandbox. " * 30
TOOL = {"name": "bash", "description": "run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}  # fmt: skip


# --- the synthetic store -------------------------------------------------------------------------


def _request(dialect: str, task: str, turns: int) -> dict[str, Any]:
    """The body a harness sends at turn `turns`: the whole conversation so far."""
    command = (
        "grep -rn 'def parse' src/ | head -{}".format
    )  # turn t's command: the history is stable
    output = "\n".join(f"src/mod{i}.py:{10 * i}: def parse_{i}(text):" for i in range(6))
    if dialect == "chat":
        messages: list[Any] = [{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": f"Fix the failing test of {task}."}]  # fmt: skip
        for t in range(turns):
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{t}", "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps({"command": command(t + 5)})}}]},
                {"role": "tool", "tool_call_id": f"call_{t}", "content": output},
            ]  # fmt: skip
        return {
            "model": "m",
            "messages": messages,
            "tools": [{"type": "function", "function": TOOL}],
        }
    if dialect == "responses":
        items: list[Any] = [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"Fix the failing test of {task}."}]}]  # fmt: skip
        for t in range(turns):
            items += [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look for parse."}]},
                {"type": "function_call", "call_id": f"call_{t}", "name": "bash",
                 "arguments": json.dumps({"command": command(t + 5)})},
                {"type": "function_call_output", "call_id": f"call_{t}", "output": output},
            ]  # fmt: skip
        return {
            "model": "m",
            "instructions": SYSTEM,
            "input": items,
            "tools": [{"type": "function", **TOOL}],
        }
    messages = [{"role": "user", "content": f"Fix the failing test of {task}."}]
    for t in range(turns):
        messages += [
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look for parse."},
             {"type": "tool_use", "id": f"toolu_{t}", "name": "bash", "input": {"command": command(t + 5)}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": output}]},
        ]  # fmt: skip
    tool = {"name": "bash", "description": TOOL["description"], "input_schema": TOOL["parameters"]}
    return {
        "model": "m",
        "system": SYSTEM,
        "messages": messages,
        "tools": [tool],
        "max_tokens": 4096,
    }


def _response(dialect: str, turn: int, last: bool) -> dict[str, Any]:
    args = json.dumps({"command": f"pytest -x tests/test_parse.py -k case{turn}"})
    if dialect == "chat":
        message = ({"role": "assistant", "content": "Fixed."} if last else {"role": "assistant", "content": None,
                   "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": args}}]})  # fmt: skip
        return {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    if dialect == "responses":
        item = ({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]}
                if last else {"type": "function_call", "call_id": f"call_{turn}", "name": "bash", "arguments": args})  # fmt: skip
        return {"object": "response", "status": "completed", "output": [item]}
    block = ({"type": "text", "text": "Fixed."} if last else
             {"type": "tool_use", "id": f"toolu_{turn}", "name": "bash", "input": json.loads(args)})  # fmt: skip
    return {"type": "message", "role": "assistant", "content": [block]}


def _write(path: Path, schema: pa.Schema, rows: list[dict[str, Any]]) -> None:
    """One record batch per row, as the proxy writes them, then the end-of-stream marker."""
    table = pa.Table.from_pylist(rows, schema=schema)
    with open(path, "wb") as f, pa.ipc.new_stream(f, schema) as writer:
        writer.write_table(table, max_chunksize=1)


def make_store(directory: Path, episodes: int, calls_per_episode: int, long_calls: int,
               seed: int = 7) -> None:  # fmt: skip
    """The synthetic store; its first episode (`LONG`) is a long one of `long_calls` calls."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    runs = 20
    per_run = episodes // runs
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for r in range(runs):
        benchmark = BENCHMARKS[r % len(BENCHMARKS)]
        harness, dialect = HARNESSES[r % len(HARNESSES)]
        model = MODELS[(r // len(HARNESSES)) % len(MODELS)]
        run = f"run-synthetic-{r:02d}"
        episode_rows, call_rows = [], []
        for e in range(per_run):
            task, attempt = f"{benchmark}-task-{e // 5:03d}", e % 5
            key = f"ep{r:02d}x{e:05d}"
            t0 = start + timedelta(hours=r, seconds=7 * e)
            infra = rng.random() < 0.05
            resolved = not infra and rng.random() < 0.3 + 0.1 * (r % 5)
            n_calls = long_calls if key == LONG else calls_per_episode
            for c in range(n_calls):
                begin = t0 + timedelta(seconds=2 * c)
                request = _request(dialect, task, c)
                response = _response(dialect, c, c == n_calls - 1)
                call_rows.append({
                    "call_id": f"{key}-{c}", "episode": key, "sequence": c, "side": False,
                    "dialect": dialect, "path": "/v1/x", "model": model, "requested_model": "m",
                    "upstream": "passthrough", "stream": False, "request_headers": "{}",
                    "request": json.dumps(request), "response": json.dumps(response),
                    "status": "ok", "status_code": 200,
                    "usage": {"input_tokens": 900 + 120 * c, "output_tokens": 40, "total_tokens": 940 + 120 * c},
                    "token_faithful_reason": "no token ids", "started_at": begin,
                    "ended_at": begin + timedelta(milliseconds=800), "ttfb_ms": 300.0, "latency_ms": 800.0,
                })  # fmt: skip
            episode_rows.append({
                "episode": key, "run": run, "benchmark": benchmark, "task": task, "harness": harness,
                "harness_version": "1.0", "model": model, "runtime": "local",
                "reward": None if infra else float(resolved), "resolved": None if infra else resolved,
                "failure_kind": rng.choice(KINDS) if infra else "none",
                "failure_message": "the sandbox was lost: SandboxNotFound" if infra else None,
                "artifacts": [], "metadata": json.dumps({"attempt": attempt}),
                "num_calls": n_calls, "started_at": t0,
                "ended_at": t0 + timedelta(seconds=2 * n_calls),
            })  # fmt: skip
        stamp = f"202611{r:02d}T000000"
        _write(directory / f"calls-{stamp}-{900000 + r}-{r:08x}.arrows", CALLS, call_rows)
        _write(directory / f"episodes-{stamp}-{900000 + r}-{r:08x}.arrows", EPISODES, episode_rows)


# --- measuring -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(client: httpx.Client, path: str, warm: int = 5) -> tuple[float, float, int]:
    """(cold ms, warm median ms, bytes of the answer) of GET path."""
    times = []
    for _ in range(warm + 1):
        t = time.perf_counter()
        r = client.get(path)
        r.raise_for_status()
        times.append((time.perf_counter() - t) * 1000)
    return times[0], statistics.median(times[1:]), len(r.content)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--calls-per-episode", type=int, default=10)
    ap.add_argument("--long-calls", type=int, default=200, help="calls of the one long episode")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "pomona-viewer-bench")
    args = ap.parse_args()
    store = (
        args.dir
        / f"v{STORE_FORMAT}-e{args.episodes}-c{args.calls_per_episode}-long{args.long_calls}"
    )
    rows_out: list[tuple[str, str, str, str]] = []
    if not store.exists():
        t = time.perf_counter()
        make_store(store, args.episodes, args.calls_per_episode, args.long_calls)
        print(f"made the synthetic store in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    size = sum(p.stat().st_size for p in store.iterdir()) / 2**20
    print(f"store: {store} ({size:.0f} MiB, {args.episodes} episodes, "
          f"{args.episodes * args.calls_per_episode + args.long_calls - args.calls_per_episode} calls)", file=sys.stderr)  # fmt: skip

    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pomona.cli", "view", str(store), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            while True:
                try:
                    client.get("/api/overview").raise_for_status()
                    break
                except httpx.TransportError:
                    if proc.poll() is not None:
                        raise SystemExit("pomona view exited") from None
                    time.sleep(0.05)
            first = (time.perf_counter() - started) * 1000
            rows_out.append(
                (
                    "start: process up and store indexed",
                    f"{first:.0f}",
                    "",
                    "cold start, includes Python imports",
                )
            )
            episodes = client.get("/api/episodes", params={"limit": 1, "offset": 1234}).json()[
                "episodes"
            ]
            key = episodes[0]["episode"]
            other = client.get("/api/episode", params={"key": key}).json()["same_task"][0][
                "episode"
            ]
            run = episodes[0]["run"]
            pages = [
                ("runs page data (/api/runs)", "/api/runs"),
                ("leaderboard data", "/api/leaderboard"),
                ("leaderboard heatmap PNG", "/api/leaderboard.png"),
                ("run header", f"/api/run?run={run}"),
                ("run tasks × attempts, first page", f"/api/run/tasks?run={run}"),
                ("run tasks × attempts, last page", f"/api/run/tasks?run={run}&offset=50"),
                ("run filtered: infra failures", f"/api/run/tasks?run={run}&status=infra"),
                (
                    "episodes: filter harness + status, page 3",
                    "/api/episodes?harness=codex&status=fail&offset=100",
                ),
                ("episode: timeline of its calls + artifacts", f"/api/episode?key={key}"),
                ("episode raw rows (JSON)", f"/api/episode/raw?key={key}"),
                ("compare: the second episode", f"/api/episode?key={other}"),
                (
                    f"episode of {args.long_calls} calls (new messages only)",
                    f"/api/episode?key={LONG}",
                ),
                (
                    f"one call of it: all {args.long_calls * 2} messages it sent",
                    f"/api/episode/call?key={LONG}&n={args.long_calls - 1}",
                ),
                ("a page's HTML", "/episode"),
            ]
            for label, path in pages:
                cold, warm, size = timed(client, path)
                rows_out.append((label, f"{cold:.1f}", f"{warm:.1f}", f"{size / 1024:.0f} KiB"))
            rows_out.append(("viewer process memory (RSS)", f"{rss_mb(proc.pid):.0f} MiB", "", ""))
    finally:
        proc.terminate()
        proc.wait(30)

    t = time.perf_counter()
    calls = trajectories.to_pandas(store, "calls")
    one = calls[calls["episode"] == key]
    pandas_ms = (time.perf_counter() - t) * 1000
    rows_out.append(("instead: pandas, load calls + pick one episode", f"{pandas_ms:.0f}", "",
                     f"{len(one)} rows; {calls.memory_usage(deep=True).sum() / 2**20:.0f} MiB in memory"))  # fmt: skip
    del calls
    t = time.perf_counter()
    leaderboard.leaderboard(store, (1, 5))
    rows_out.append(
        (
            "instead: pomona leaderboard (reads all episodes)",
            f"{(time.perf_counter() - t) * 1000:.0f}",
            "",
            "",
        )
    )

    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    header = ("what", "cold ms", "warm ms (p50 of 5)", "notes")
    widths = [max(len(str(r[i])) for r in [header, *rows_out]) for i in range(4)]
    for r in [header, *rows_out]:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
