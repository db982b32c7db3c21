"""The `pomona` command line. Each subsystem registers its own subcommand (`add_*_parser`,
whose parser sets `func`), so this file only lists them."""

from __future__ import annotations

import argparse


def _add_demo_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="a short offline demo of the sandbox layer")
    p.add_argument("--state-dir", help="where sandboxes live (default: a new temporary directory)")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from pomona.demo import run

    return run(args.state_dir)


def build_parser() -> argparse.ArgumentParser:
    from pomona.benchmarks.grade import add_grade_parser
    from pomona.benchmarks.leaderboard import add_leaderboard_parser
    from pomona.benchmarks.swe_tasks import add_tasks_parser
    from pomona.browser_env.image import add_browser_parser
    from pomona.deploy import add_deploy_parser
    from pomona.harnesses.cli import add_harnesses_parser
    from pomona.orchestrator.gc import add_gc_parser
    from pomona.orchestrator.images_cli import add_images_parser
    from pomona.orchestrator.server.app import add_serve_parser
    from pomona.proxy.cli import add_proxy_parser
    from pomona.run import add_run_parser
    from pomona.trainer.cli import add_export_parser, add_train_parser
    from pomona.viewer.app import add_view_parser

    parser = argparse.ArgumentParser(
        prog="pomona", description="Real agent harnesses in sandboxes, every model call recorded.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_demo_parser(sub)
    add_serve_parser(sub)
    add_proxy_parser(sub)
    add_harnesses_parser(sub)
    add_tasks_parser(sub)
    add_run_parser(sub)
    add_leaderboard_parser(sub)
    add_export_parser(sub)
    add_train_parser(sub)
    add_grade_parser(sub)
    add_images_parser(sub)
    add_browser_parser(sub)
    add_view_parser(sub)
    add_deploy_parser(sub)
    add_gc_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
