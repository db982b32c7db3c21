"""Pomona's BrowserEnv beside BrowserGym on the same MiniWoB++ tasks: reset and step latency and
peak memory, with the same observation on both sides (BrowserGym's: screenshot, DOM snapshot,
accessibility tree and element properties, Pomona's `interface="browsergym"`), Debian's
Chromium for both.

    python perf/browser_bench.py [--tasks 24] [--steps 3]

A reset is a new episode on a task (a fresh instance drawn); a step scrolls the window down or
up and is timed from the action to the next observation. Memory is the peak, over the run, of
the resident memory of the benchmark process and everything it started (Playwright's driver,
Chromium; on Pomona's side also the sandbox Chromium runs in). One process per side, one
episode at a time:

    pomona      one BrowserEnv: Chromium inside a `local` sandbox, driven over CDP through the
                sandbox's port tunnel; one browser serves all MiniWoB episodes
    browsergym  browsergym-core 0.14.3 (in its own venv from perf/browsergym_venv.sh: it pins
                playwright 1.44): Chromium launched on the host, a new browser per reset

Nothing is asserted: the figures go in the README.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
# MiniWoB tasks both sides have and that the package does not mark nondeterministic
TASKS = (
    "ascending-numbers", "bisect-angle", "buy-ticket", "circle-center", "click-button",
    "click-button-sequence", "click-checkboxes", "click-checkboxes-large", "click-collapsible",
    "click-color", "click-dialog", "click-link", "click-menu", "click-option", "click-pie",
    "click-shades", "click-shape", "click-tab", "click-test", "click-widget", "count-shape",
    "enter-password", "enter-text", "focus-text", "login-user", "navigate-tree", "read-table",
    "simple-arithmetic", "social-media", "text-transform",
)  # fmt: skip


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


class Peak:
    """Samples this process tree's memory every 0.2 s."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, tree_rss(os.getpid()))

    def stop(self) -> int:
        self._stop.set()
        return max(self.peak, tree_rss(os.getpid()))


def pomona_side(tasks: list[str], steps: int) -> dict[str, Any]:
    import gymnasium as gym

    import pomona  # noqa: F401 - registers the envs
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    state = tempfile.mkdtemp(prefix="pomona-browser-bench-")
    peak = Peak()
    env = gym.make(
        "pomona/BrowserEnv-v0", benchmark="miniwob", interface="browsergym", state_dir=state,
        max_steps=steps + 1,
    )  # fmt: skip
    resets, latencies = [], []
    try:
        for n, name in enumerate(tasks):
            t0 = time.perf_counter()
            _, info = env.reset(seed=n, options={"task": f"miniwob/{name}"})
            resets.append(time.perf_counter() - t0)
            if "failure" in info:
                raise RuntimeError(f"{name}: {info}")
            for i in range(steps):
                t0 = time.perf_counter()
                env.step(f"scroll(0, {(200, -200)[i % 2]})")
                latencies.append(time.perf_counter() - t0)
    finally:
        env.close()
        memory = peak.stop()
        close_shared()
        LocalRuntime(state).unmount_store()
    return {"resets": resets, "steps": latencies, "memory": memory}


def use_debian_chromium() -> None:
    """Every Playwright launch gets Debian's Chromium: BrowserGym launches a second browser for
    its chat window without taking `pw_chromium_kwargs`, and Playwright's own browser download
    cannot happen here."""
    from playwright.sync_api import BrowserType

    launch = BrowserType.launch

    def launch_debian(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("executable_path", CHROMIUM)
        return launch(self, *args, **kwargs)

    BrowserType.launch = launch_debian  # type: ignore[method-assign]


def browsergym_side(tasks: list[str], steps: int) -> dict[str, Any]:
    """Inside BrowserGym's venv."""
    import browsergym.miniwob  # noqa: F401 - registers browsergym/miniwob.*
    import gymnasium as gym
    import miniwob

    os.environ["MINIWOB_URL"] = (Path(miniwob.__file__).parent / "html" / "miniwob").as_uri() + "/"
    use_debian_chromium()
    peak = Peak()
    resets, latencies = [], []
    for n, name in enumerate(tasks):
        env = gym.make(f"browsergym/miniwob.{name}")
        try:
            t0 = time.perf_counter()
            env.reset(seed=n)
            resets.append(time.perf_counter() - t0)
            for i in range(steps):
                t0 = time.perf_counter()
                env.step(f"scroll(0, {(200, -200)[i % 2]})")
                latencies.append(time.perf_counter() - t0)
        finally:
            env.close()
    return {"resets": resets, "steps": latencies, "memory": peak.stop()}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(system: str, result: dict[str, Any]) -> str:
    resets = [x * 1000 for x in result["resets"]]
    steps = [x * 1000 for x in result["steps"]]
    return (
        f"| {system} | {len(resets)} | {statistics.median(resets):.0f} ms | "
        f"{statistics.median(steps):.0f} ms | {percentile(steps, 0.9):.0f} ms | "
        f"{result['memory'] / 2**20:.0f} MiB |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=24, help=f"how many of the {len(TASKS)} tasks")
    p.add_argument("--steps", type=int, default=3, help="scroll steps per episode")
    p.add_argument("--side", choices=["browsergym"], help=argparse.SUPPRESS)
    p.add_argument("--browsergym-python", help="default: built by perf/browsergym_venv.sh")
    args = p.parse_args()
    tasks = list(TASKS[: args.tasks])
    if args.side == "browsergym":
        print(json.dumps(browsergym_side(tasks, args.steps)))
        return
    python = (
        args.browsergym_python
        or subprocess.run(
            ["bash", str(HERE / "browsergym_venv.sh")], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    argv = [python, __file__, "--side", "browsergym", "--tasks", str(args.tasks),
            "--steps", str(args.steps)]  # fmt: skip
    print(f"{len(tasks)} MiniWoB tasks, {args.steps} scroll steps each; Chromium {CHROMIUM}\n")
    print("| system | episodes | reset p50 | step p50 | step p90 | peak memory |")
    print("|---|---|---|---|---|---|")
    print(row("Pomona BrowserEnv (browsergym interface)", pomona_side(tasks, args.steps)))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"the BrowserGym side failed: {proc.stderr[-3000:]}")
    print(row("BrowserGym 0.14.3", json.loads(proc.stdout.strip().splitlines()[-1])))


if __name__ == "__main__":
    sys.exit(main())
