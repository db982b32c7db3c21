"""The `pomona` command line. Each subsystem registers its own subcommand (an `add_*_parser`
function whose parser sets `func`); this file lists them by module and help line only, and
imports a subsystem when its subcommand is the one run, so `pomona --help` and every command
start without the other subsystems' imports (numpy, torch, playwright, litellm, transformers)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NamedTuple


class Command(NamedTuple):
    module: str  # where the subcommand's parser is registered
    register: str  # the function there: register(subparsers)
    help: str  # its line in `pomona --help` (the same as the one it registers)


COMMANDS: dict[str, Command] = {
    "demo": Command("pomona.cli", "_add_demo_parser",
                    "a short offline demo of the sandbox layer"),
    "serve": Command("pomona.orchestrator.server.app", "add_serve_parser",
                     "run the sandbox service (REST API)"),
    "proxy": Command("pomona.proxy.cli", "add_proxy_parser",
                     "the recording model proxy (POST /episodes -> {key, base_url})"),
    "harnesses": Command("pomona.harnesses.cli", "add_harnesses_parser",
                         "install, list and check the agent harnesses"),
    "tasks": Command("pomona.benchmarks.swebench.task_sets", "add_tasks_parser",
                     "build and inspect the local task sets"),
    "run": Command("pomona.run_cli", "add_run_parser",
                   "run a harness with a model on a benchmark, graded and recorded"),
    "leaderboard": Command("pomona.benchmarks.leaderboard", "add_leaderboard_parser",
                           "rank (benchmark, harness, model) from stored episodes"),
    "export": Command("pomona.trainer.cli", "add_export_parser",
                      "recorded episodes as SFT or RL data for a trainer"),
    "train": Command("pomona.trainer.cli", "add_train_parser",
                     "train on exported data on the CPU (TRL)"),
    "grade": Command("pomona.benchmarks.swebench.evaluation", "add_grade_parser",
                     "grade SWE-bench predictions like swebench's run_evaluation"),
    "images": Command("pomona.orchestrator.images_cli", "add_images_parser",
                      "the local runtime's image cache: list, remove, prune"),
    "browser": Command("pomona.browser_env.image", "add_browser_parser",
                       "the browser layer: build its container image"),
    "view": Command("pomona.viewer.app", "add_view_parser",
                    "browse runs, the leaderboard and episodes in a browser"),
    "deploy": Command("pomona.deploy", "add_deploy_parser",
                      "Kubernetes manifests for a Pomona deployment"),
    "doctor": Command("pomona.doctor", "add_doctor_parser",
                      "what this machine has and lacks, per runtime, and the fixes"),
    "gc": Command("pomona.orchestrator.gc", "add_gc_parser",
                  "release what a state dir holds that no live process owns"),
}  # fmt: skip


def _add_demo_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help=COMMANDS["demo"].help)
    p.add_argument("--state-dir", help="where sandboxes live (default: a new temporary directory)")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from pomona.demo import run

    return run(args.state_dir)


def build_parser(*load: str) -> argparse.ArgumentParser:
    """The `pomona` parser, with the subcommands named in `load` registered in full (their
    modules imported) and the others as names with their help line only."""
    parser = argparse.ArgumentParser(
        prog="pomona", description="Real agent harnesses in sandboxes, every model call recorded.")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        if name in load:
            getattr(importlib.import_module(command.module), command.register)(sub)
        else:
            sub.add_parser(name, help=command.help)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)  # `pomona` has no options
    args = build_parser(*([chosen] if chosen in COMMANDS else [])).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
