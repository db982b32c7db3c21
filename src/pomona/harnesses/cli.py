"""`pomona harnesses install [NAME...] | list | check`: the payload and the cross-harness table."""

from __future__ import annotations

import argparse
from pathlib import Path

from pomona.harnesses import payload
from pomona.harnesses.registry import harnesses, names


def add_harnesses_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `harnesses` on the `pomona` command line; `args.func(args)` runs it."""
    p = subparsers.add_parser("harnesses", help="install, list and check the agent harnesses")
    p.add_argument(
        "--root",
        type=Path,
        default=payload.DEFAULT_ROOT,
        help=f"the tools payload directory (default {payload.DEFAULT_ROOT})",
    )
    sub = p.add_subparsers(dest="harnesses_command", required=True)
    i = sub.add_parser("install", help="install harnesses into the payload (cached)")
    i.add_argument("names", nargs="*", metavar="NAME", help=f"default: all of {', '.join(names())}")
    i.add_argument(
        "--from", dest="source", help="a binary path or URL, for a harness no registry has"
    )
    i.add_argument("--force", action="store_true", help="reinstall even if cached")
    sub.add_parser("list", help="every harness: version, dialects, installed or not")
    c = sub.add_parser("check", help="the file task for each harness, as a table")
    c.add_argument("names", nargs="*", metavar="NAME")
    c.add_argument("--runtime", default="local", choices=["local", "docker"])
    c.add_argument("--image", default="host")
    c.add_argument("--dialect", choices=["chat", "responses", "anthropic"])
    p.set_defaults(func=run_harnesses_command)


def run_harnesses_command(args: argparse.Namespace) -> int:
    if args.harnesses_command == "install":
        sources = {n: args.source for n in args.names} if args.source else None
        report = payload.install(args.names or None, args.root, sources=sources, force=args.force)
        for name, version in report.installed.items():
            print(f"installed   {name} {version}")
        for name, version in report.cached.items():
            print(f"cached      {name} {version}")
        for name, why in report.unavailable.items():
            print(f"unavailable {name}: {why}")
        for name, why in report.failed.items():
            print(f"FAILED      {name}: {why}")
        print(f"{args.root} ({report.seconds:.1f} s); contents in {args.root / 'VERSIONS'}")
        return 0 if report.ok else 1
    if args.harnesses_command == "list":
        have = payload.installed(args.root)
        for h in harnesses():
            state = "installed" if have.get(h.name) == h.version else "-"
            print(f"{h.name:15} {h.version:10} {','.join(h.dialects):26} {state}")
        return 0
    from pomona.harnesses.check import check, table

    rows = check(
        args.names or None,
        runtime=args.runtime,
        image=args.image,
        dialect=args.dialect,
        root=args.root,
    )
    print(table(rows))
    return 0 if all(r.passed or r.failure_kind == "-" for r in rows) else 1
