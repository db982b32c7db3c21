"""`pomona export` and `pomona train`.

pomona export sft|rl --runs D [--runs D2] --format hf|trl|verl|slime|orchard --out O
              [--resolved | --unresolved] [--min-reward X] [--max-reward X]
              [--harness H]... [--model M]... [--task T]... [--tokenizer MODEL_DIR]
              [--discount G] [--drop-zero-variance]
pomona train tiny --out DIR [--runs D]        a tiny model + tokenizer, made offline
pomona train sft --data EXPORT --model DIR --out DIR [--steps N] [--lr X] [--batch-size B]
"""

from __future__ import annotations

import argparse
import json
import sys

from pomona.trainer.export import FORMATS, KINDS


def add_export_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="recorded episodes as SFT or RL data for a trainer")
    p.add_argument("kind", choices=KINDS)
    p.add_argument(
        "--runs", action="append", required=True, help="a trajectory directory (repeatable)"
    )
    p.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
    p.add_argument("--out", required=True, help="the directory to write")
    resolved = p.add_mutually_exclusive_group()
    resolved.add_argument("--resolved", action="store_const", const=True, dest="resolved")
    resolved.add_argument("--unresolved", action="store_const", const=False, dest="resolved")
    p.add_argument("--min-reward", type=float)
    p.add_argument("--max-reward", type=float)
    p.add_argument("--harness", action="append", help="only these harnesses (repeatable)")
    p.add_argument("--model", action="append", help="only these models (repeatable)")
    p.add_argument("--task", action="append", help="only these tasks (repeatable)")
    p.add_argument("--tokenizer", help="a model directory whose tokenizer renders calls without "
                   "token ids and checks drift (rl)")  # fmt: skip
    p.add_argument("--discount", type=float, default=1.0, help="per-call reward discount (rl)")
    p.add_argument(
        "--drop-zero-variance",
        action="store_true",
        help="leave out episodes whose task group has no reward variance (rl)",
    )
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from pomona.trainer.episodes import Filters
    from pomona.trainer.export import export

    filters = Filters(resolved=args.resolved, min_reward=args.min_reward, max_reward=args.max_reward,
                      harness=args.harness, model=args.model, task=args.task)  # fmt: skip
    try:
        report = export(args.kind, args.runs, args.fmt, args.out, filters=filters,
                        tokenizer=args.tokenizer, discount=args.discount,
                        drop_zero_variance=args.drop_zero_variance)  # fmt: skip
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"pomona export: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": str(report.path), "episodes": report.episodes, "rows": report.rows,
                      **report.counts}))  # fmt: skip
    return 0


def add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="train on exported data on the CPU (TRL)")
    sub = p.add_subparsers(dest="what", required=True)
    tiny = sub.add_parser("tiny", help="make a tiny model and tokenizer offline")
    tiny.add_argument("--out", required=True)
    tiny.add_argument(
        "--runs",
        action="append",
        default=[],
        help="trajectory directories whose prompts train the tokenizer",
    )
    tiny.add_argument("--hidden-size", type=int, default=64)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.set_defaults(func=_tiny)
    sft = sub.add_parser("sft", help="supervised fine-tuning with TRL's SFTTrainer")
    sft.add_argument("--data", required=True, help="an `pomona export sft` directory")
    sft.add_argument("--model", required=True, help="a Hugging Face model directory")
    sft.add_argument("--out", required=True)
    sft.add_argument("--steps", type=int, default=50)
    sft.add_argument("--lr", type=float, default=3e-3)
    sft.add_argument("--batch-size", type=int, default=2)
    sft.add_argument("--max-length", type=int, default=4096)
    sft.set_defaults(func=_sft)


def corpus(runs: list[str]) -> list[str]:
    """The texts of every conversation recorded in `runs` (to train a tokenizer on)."""
    from pomona.trainer.episodes import Filters, load

    texts = []
    for ep in load(runs, Filters(include_failed=True, include_helpers=True)):
        messages, tools = ep.conversation()
        texts += [m.get("content") or "" for m in messages] + [json.dumps(t) for t in tools]
        texts += [c["function"]["arguments"] for m in messages for c in m.get("tool_calls") or []]
    return texts


def _tiny(args: argparse.Namespace) -> int:
    from pomona.trainer.tiny import make_model

    path = make_model(args.out, corpus(args.runs), hidden_size=args.hidden_size, layers=args.layers)
    print(json.dumps({"model": str(path)}))
    return 0


def _sft(args: argparse.Namespace) -> int:
    from pomona.trainer.train import sft

    try:
        result = sft(args.data, args.model, args.out, steps=args.steps, learning_rate=args.lr,
                     batch_size=args.batch_size, max_length=args.max_length)  # fmt: skip
    except (ValueError, FileNotFoundError) as e:
        print(f"pomona train: error: {e}", file=sys.stderr)
        return 2
    first, last = result.losses[0], result.losses[-1]
    print(json.dumps({"model": str(result.output_dir), "steps": result.steps,
                      "loss_first": first, "loss_last": last}))  # fmt: skip
    return 0
