"""Gymnasium's check_env on BrowserEnv, run many times: determinism holds every time, not most
times (MiniWoB's countdown once made 2 runs in 6 fail). Too long for the suite (each run resets
and steps a real browser about ten times), so it is a script; its figure goes in the README.

    python perf/browser_checks.py [--runs 10] [--interface webvoyager browsergym]
"""

from __future__ import annotations

import argparse
import tempfile
import traceback

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import pomona  # noqa: F401 - registers the envs
from pomona.orchestrator.runtimes.local import LocalRuntime
from pomona.orchestrator.sdk.shared import close_shared


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--interface", nargs="+", default=["webvoyager", "browsergym"])
    args = p.parse_args()
    state = tempfile.mkdtemp(prefix="pomona-browser-checks-")
    try:
        for interface in args.interface:
            env = gym.make(
                "pomona/BrowserEnv-v0", benchmark="miniwob", interface=interface, state_dir=state
            )
            passed = 0
            for _ in range(args.runs):
                try:
                    check_env(env.unwrapped)
                    passed += 1
                except AssertionError:
                    traceback.print_exc(limit=3)
            env.close()
            print(f"check_env, interface={interface}: {passed}/{args.runs} runs passed", flush=True)
    finally:
        close_shared()
        LocalRuntime(state).unmount_store()


if __name__ == "__main__":
    main()
