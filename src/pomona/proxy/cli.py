"""`pomona proxy`: the recording proxy as a service."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_proxy_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `proxy` on a `pomona` subparsers object; the parser's `func` runs it."""
    p = subparsers.add_parser(
        "proxy", help="the recording model proxy (POST /episodes -> {key, base_url})"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4000)
    p.add_argument("--config", type=Path, help="model list YAML in LiteLLM's model_list shape")
    p.add_argument(
        "--trajectories", type=Path, default=Path("pomona-runs"), help="where calls are recorded"
    )
    p.add_argument(
        "--no-record", action="store_true", help="record nothing (e.g. a scripted upstream)"
    )
    p.add_argument(
        "--public-url", help="the URL clients use to reach this proxy, for episode base URLs"
    )
    p.add_argument(
        "--script",
        type=Path,
        help="shell commands, one a line, for `scripted` calls outside episodes",
    )
    p.add_argument("--durable", action="store_true", help="fsync every recorded call")
    p.set_defaults(func=run_proxy)
    return p


def run_proxy(args: argparse.Namespace) -> int:
    import uvicorn

    from pomona.proxy.app import create_app
    from pomona.proxy.config import ProxyConfig

    script = (
        [ln for ln in args.script.read_text().splitlines() if ln.strip()] if args.script else []
    )
    config = ProxyConfig.from_yaml(
        args.config,
        trajectories=None if args.no_record else args.trajectories,
        public_url=args.public_url,
        default_script=script,
        durable=args.durable,
    )
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_level="warning",
        http="h11",
        access_log=False,
    )
    return 0


def cli_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pomona")
    add_proxy_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["proxy", *(argv or [])] if argv is None or argv[:1] != ["proxy"] else argv
    )
    return args.func(args)
