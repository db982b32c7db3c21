"""Browser step latency and episode throughput: Pomona's BrowserEnv beside BrowserGym, in one run,
on the same MiniWoB++ tasks (the `miniwob` package's pages, Debian's Chromium for both).

    python perf/browser_bench.py [--concurrency 1 2 4] [--episodes 8] [--steps 3]

One episode is a reset onto a task (a fresh instance drawn) and `--steps` actions, each scrolling
the window down or up; a step is timed from the action to the next observation with its
screenshot (Pomona: set-of-marks screenshot, URL and element list; BrowserGym: screenshot, DOM
snapshot and accessibility tree). Episodes per minute count wall time from the first reset,
browser start-up included, with `c` episodes running at once:

    pomona      c threads, each with its own BrowserEnv: Chromium inside a `local` sandbox, driven
                over CDP through the sandbox's port tunnel (one sandbox serves all of a thread's
                MiniWoB episodes, as BrowserEnv does)
    browsergym  c processes (its Playwright instance is process-global), each with its own env:
                Chromium launched directly on the host, a new browser per reset (as BrowserGym does)

BrowserGym (browsergym-core 0.14.3) pins playwright==1.44, so it runs from its own venv,
built by perf/browsergym_venv.sh; this script calls itself there for the BrowserGym side.
Nothing is asserted: the figures go in the README.
"""

from __future__ import annotations

import argparse
import json
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
TASKS = (
    "click-button", "click-link", "enter-text", "focus-text", "login-user", "enter-password",
    "click-checkboxes", "click-tab",
)  # fmt: skip  # Pomona's sampled MiniWoB tasks (benchmarks/browser/miniwob.py)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def shares(episodes: int, workers: int) -> list[list[str]]:
    """The episodes' tasks, dealt round-robin to the workers."""
    tasks = [TASKS[i % len(TASKS)] for i in range(episodes)]
    return [tasks[w::workers] for w in range(workers)]


# --- Pomona -----------------------------------------------------------------------------------


def pomona_worker(tasks: list[str], steps: int, state_dir: str, out: list[float]) -> None:
    import gymnasium as gym

    import pomona  # noqa: F401 - registers the envs

    env = gym.make("pomona/BrowserEnv-v0", benchmark="miniwob", state_dir=state_dir)
    try:
        for n, name in enumerate(tasks):
            env.reset(seed=n, options={"task": f"miniwob/{name}"})
            for i in range(steps):
                t0 = time.perf_counter()
                _, _, terminated, _, info = env.step(f"Scroll [WINDOW]; {('down', 'up')[i % 2]}")
                out.append(time.perf_counter() - t0)
                if terminated:
                    raise RuntimeError(f"{name}: the episode ended on a scroll: {info}")
    finally:
        env.close()


def run_pomona(concurrency: int, episodes: int, steps: int) -> dict[str, Any]:
    from pomona.gym.sandboxes import _close_all
    from pomona.orchestrator.runtimes.local import LocalRuntime

    state = tempfile.mkdtemp(prefix="pomona-browser-bench-")
    latencies: list[float] = []
    errors: list[BaseException] = []

    def work(tasks: list[str]) -> None:
        try:
            pomona_worker(tasks, steps, state, latencies)
        except BaseException as e:  # noqa: BLE001 - reported after the join
            errors.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(s,)) for s in shares(episodes, concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    _close_all()
    LocalRuntime(state).unmount_store()
    if errors:
        raise errors[0]
    return {"wall": wall, "latencies": latencies}


# --- BrowserGym (runs in its own venv) ----------------------------------------------------------


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


def browsergym_worker(job: tuple[list[str], int]) -> list[float]:
    import browsergym.miniwob  # noqa: F401 - registers browsergym/miniwob.*
    import gymnasium as gym

    use_debian_chromium()
    tasks, steps = job
    latencies: list[float] = []
    for n, name in enumerate(tasks):
        env = gym.make(f"browsergym/miniwob.{name}")
        try:
            env.reset(seed=n)
            for i in range(steps):
                t0 = time.perf_counter()
                _, _, terminated, _, info = env.step(f"scroll(0, {(200, -200)[i % 2]})")
                latencies.append(time.perf_counter() - t0)
                if terminated:
                    raise RuntimeError(f"{name}: the episode ended on a scroll: {info}")
        finally:
            env.close()
    return latencies


def browsergym_side(concurrency: int, episodes: int, steps: int) -> None:
    """Inside BrowserGym's venv: c processes, then one JSON line."""
    import multiprocessing
    import os

    import miniwob

    root = Path(miniwob.__file__).parent / "html" / "miniwob"
    os.environ["MINIWOB_URL"] = root.as_uri() + "/"
    jobs = [(s, steps) for s in shares(episodes, concurrency)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(concurrency) as pool:
        results = pool.map(browsergym_worker, jobs)
    wall = time.perf_counter() - t0
    print(json.dumps({"wall": wall, "latencies": [x for r in results for x in r]}))


def run_browsergym(python: str, concurrency: int, episodes: int, steps: int) -> dict[str, Any]:
    argv = [python, __file__, "--side", "browsergym", "--concurrency", str(concurrency),
            "--episodes", str(episodes), "--steps", str(steps)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"the BrowserGym side failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the table ----------------------------------------------------------------------------------


def row(system: str, concurrency: int, episodes: int, result: dict[str, Any]) -> str:
    ms = [x * 1000 for x in result["latencies"]]
    per_minute = episodes / result["wall"] * 60
    return (
        f"{system:<11} {concurrency:>11} {episodes:>8} {result['wall']:>7.1f} {per_minute:>12.1f} "
        f"{statistics.median(ms):>11.0f} {percentile(ms, 0.9):>11.0f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--episodes", type=int, default=8, help="episodes per concurrency level")
    p.add_argument("--steps", type=int, default=3, help="actions per episode")
    p.add_argument("--side", choices=["browsergym"], help=argparse.SUPPRESS)
    p.add_argument("--browsergym-python", help="default: built by perf/browsergym_venv.sh")
    args = p.parse_args()
    if args.side == "browsergym":
        browsergym_side(args.concurrency[0], args.episodes, args.steps)
        return
    python = (
        args.browsergym_python
        or subprocess.run(
            ["bash", str(HERE / "browsergym_venv.sh")], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    print(f"{args.episodes} MiniWoB episodes per level, {args.steps} scroll steps each; "
          f"Chromium {CHROMIUM}\n")  # fmt: skip
    print(f"{'system':<11} {'concurrency':>11} {'episodes':>8} {'wall s':>7} {'episodes/min':>12} "
          f"{'step p50 ms':>11} {'step p90 ms':>11}")  # fmt: skip
    for c in args.concurrency:
        print(row("pomona", c, args.episodes, run_pomona(c, args.episodes, args.steps)), flush=True)
        bg = run_browsergym(python, c, args.episodes, args.steps)
        print(row("browsergym", c, args.episodes, bg), flush=True)


if __name__ == "__main__":
    sys.exit(main())
