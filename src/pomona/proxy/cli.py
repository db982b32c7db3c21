"""`pomona proxy`: the recording proxy as a service."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_proxy_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
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
    for name, default in (("connect", 10.0), ("read", 600.0), ("total", None)):
        p.add_argument(
            f"--{name}-timeout",
            type=_seconds,
            default=default,
            metavar="S",
            help=f"upstream {name} timeout in seconds for every model ('none': no limit; "
            f"default {default}); a model's model_info.pomona.timeouts overrides it",
        )
    p.add_argument(
        "--api-keys-file",
        type=Path,
        help="name:key lines; with keys, every route but /e/KEY/... needs one "
        "(also POMONA_PROXY_API_KEYS)",
    )
    p.set_defaults(func=run_proxy)
    return p


def _seconds(text: str) -> float | None:
    if text.lower() in ("none", "0"):
        return None
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a timeout must be positive seconds, not {text!r}")
    return value


def run_proxy(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    from pomona.keys import parse_keys
    from pomona.proxy import auth
    from pomona.proxy.app import create_app
    from pomona.proxy.config import ProxyConfig, Timeouts

    script = (
        [ln for ln in args.script.read_text().splitlines() if ln.strip()] if args.script else []
    )
    config = ProxyConfig.from_yaml(
        args.config,
        trajectories=None if args.no_record else args.trajectories,
        public_url=args.public_url,
        default_script=script,
        durable=args.durable,
        timeouts=Timeouts(args.connect_timeout, args.read_timeout, args.total_timeout),
        api_keys=parse_keys(
            args.api_keys_file.read_text() if args.api_keys_file else os.environ.get(auth.ENV),
            str(args.api_keys_file) if args.api_keys_file else auth.ENV,
        ),
    )
    if not config.api_keys and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"pomona proxy: serving {args.host} without API keys: anyone who reaches it can "
            f"open episodes and use its upstreams (set {auth.ENV}=name:key,...)"
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
    return int(args.func(args))
