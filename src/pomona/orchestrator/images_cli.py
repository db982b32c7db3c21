"""`pomona images list|remove|prune`: the local runtime's image cache, by name and digest.

pomona images list [--state-dir D]          every cached name, the digest it stands for, size
pomona images remove REF... [--state-dir D]  forget names (their layers go at the next prune)
pomona images prune [--state-dir D]          delete digests no name points to and layers that
                                             neither a cached image nor a live sandbox or
                                             snapshot stacks
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

DEFAULT_STATE = "/var/lib/pomona"


def layers_in_use(runtime: Any) -> set[str]:
    """Lower directories of the runtime's live sandboxes and of its snapshots."""
    used = {layer for live in runtime.sandboxes.values() for layer in live.record.lowers}
    for path in (runtime.state / "snapshots").glob("*/snapshot.json"):
        try:
            used.update(json.loads(path.read_text()).get("lowers", []))
        except (OSError, ValueError):
            continue
    return used


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _run(args: argparse.Namespace) -> int:
    from pomona.orchestrator.runtimes.local import LocalRuntime

    runtime = LocalRuntime(args.state_dir)
    asyncio.run(runtime.start())
    try:
        store = runtime.images
        if args.images_command == "list":
            rows = store.cached()
            if not rows:
                print(f"no cached images in {store.root}")
            for r in rows:
                used = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["used_at"] or 0))
                print(
                    f"{r['ref']}  {r['digest'][:19]}  {r['layers']} layers  "
                    f"{_human(r['bytes'])}  used {used}"
                )
            return 0
        if args.images_command == "remove":
            missing = [ref for ref in args.refs if not store.remove(ref)]
            for ref in missing:
                print(f"not cached: {ref}")
            return 1 if missing else 0
        done = store.prune(layers_in_use(runtime))
        print(
            f"pruned {done['digests']} digests and {done['layers']} layers "
            f"({_human(done['bytes'])}) from {store.root}"
        )
        return 0
    finally:
        asyncio.run(runtime.close())


def add_images_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `images` on a `pomona` subparsers object."""
    p = subparsers.add_parser("images", help="the local runtime's image cache: list, remove, prune")
    sub = p.add_subparsers(dest="images_command", required=True)
    for name, text in (
        ("list", "every cached image name and its digest"),
        ("remove", "forget image names"),
        ("prune", "delete what no image name, sandbox or snapshot uses"),
    ):
        q = sub.add_parser(name, help=text)
        q.add_argument(
            "--state-dir",
            type=Path,
            default=Path(DEFAULT_STATE),
            help=f"the local runtime's state directory (default {DEFAULT_STATE})",
        )
        if name == "remove":
            q.add_argument("refs", nargs="+", metavar="REF")
        q.set_defaults(func=_run)
    return p
