"""From recorded calls to a trained checkpoint and back into the harness, on a CPU, offline.

    .venv/bin/python examples/cpu_recipe.py [--out DIR] [--harness pi] [--steps 150]

1. record: the `oracle` model (the scripted model replaying each task's gold solution) drives a
   real harness on the built-in `files` and `text` tasks, through the recording proxy;
2. export: those episodes as an SFT set in TRL's conversational format;
3. make a tiny model offline (tokenizer trained on the recorded prompts, random weights);
4. SFT it with TRL's SFTTrainer on the CPU;
5. serve it through `transformers/` routes of the proxy and run it in the same harness on the
   same tasks: once greedily (what SFT taught it), then `--group` sampled attempts per task;
6. export the sampled episodes as token-level RL samples (verl's parquet): recorded token ids
   and logprobs, merged or per-call, drift-checked against the model's own template, each with
   its group-normalised advantage.

Prints one JSON summary. What it measures is memorisation of six tasks by a model of a few
hundred thousand parameters, not generalisation: the point is that every step is the real one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # a shared 2-core box: one torch thread is fastest

from pomona import gym as pomona_gym  # noqa: E402
from pomona.benchmarks import builtin  # noqa: E402
from pomona.episodes import EpisodeRecord  # noqa: E402
from pomona.proxy import ProxyConfig, ProxyServer  # noqa: E402
from pomona.trainer.cli import corpus  # noqa: E402
from pomona.trainer.episodes import Filters  # noqa: E402
from pomona.trainer.export import export  # noqa: E402
from pomona.trainer.tiny import make_model  # noqa: E402
from pomona.trainer.train import sft  # noqa: E402


def outcomes(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Resolved count, and any infra failures by task (never counted as a 0)."""
    return {
        "resolved": sum(bool(r.resolved) for r in records),
        "episodes": len(records),
        "failures": {r.task: r.failure_kind for r in records if r.failure_kind != "none"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="pomona-recipe")
    parser.add_argument("--harness", default="pi")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--group", type=int, default=4, help="sampled attempts per task (RL)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    tasks = builtin.tasks("files") + builtin.tasks("text")
    state = tempfile.mkdtemp(prefix="pomona-recipe-")
    summary: dict[str, Any] = {"harness": args.harness, "tasks": len(tasks)}
    t0 = time.monotonic()

    def run(proxy: ProxyServer, model: str, n: int = 1) -> list[EpisodeRecord]:
        return asyncio.run(
            pomona_gym.rollout(
                tasks,
                args.harness,
                model,
                n=n,
                proxy=proxy,
                state_dir=state,
                concurrency=2,
                timeout=600,
                progress=False,
            )
        )

    try:
        # 1. record oracle trajectories through the real harness
        with ProxyServer(ProxyConfig(trajectories=out / "runs-oracle")) as proxy:
            summary["oracle"] = outcomes(run(proxy, "oracle"))
        summary["seconds_record"] = round(time.monotonic() - t0, 1)

        # 2. export SFT data; 3. a tiny model whose tokenizer knows the harness's prompts
        t = time.monotonic()
        data = export("sft", out / "runs-oracle", "trl", out / "sft").path
        base = make_model(
            out / "tiny-base",
            corpus([str(out / "runs-oracle")]),
            hidden_size=args.hidden_size,
            layers=args.layers,
        )

        # 4. SFT on the CPU
        result = sft(
            data, base, out / "tiny-sft", steps=args.steps, batch_size=2, learning_rate=3e-3
        )
        summary.update(
            sft_steps=result.steps,
            loss_first=round(result.losses[0], 3),
            loss_last=round(result.losses[-1], 3),
            seconds_sft=round(time.monotonic() - t, 1),
        )

        # 5. serve it through the proxy's transformers upstream, run it in the same harness:
        # greedy (what SFT taught), then sampled groups for RL
        t = time.monotonic()
        checkpoint = f"transformers/{out / 'tiny-sft'}"
        routes = [
            {"model_name": "tiny", "litellm_params": {
                "model": checkpoint, "temperature": 0, "max_tokens": 96}},
            {"model_name": "tiny-sampled", "litellm_params": {
                "model": checkpoint, "temperature": 1.0, "max_tokens": 96}},
        ]  # fmt: skip
        with ProxyServer(
            ProxyConfig.from_model_list(routes, trajectories=out / "runs-tiny")
        ) as proxy:
            summary["greedy"] = outcomes(run(proxy, "tiny"))
            summary["sampled"] = outcomes(run(proxy, "tiny-sampled", n=args.group))
        summary["seconds_serve_and_run"] = round(time.monotonic() - t, 1)

        # 6. token-level RL samples from the tiny model's own sampled episodes
        report = export(
            "rl",
            out / "runs-tiny",
            "verl",
            out / "rl",
            tokenizer=out / "tiny-sft",
            filters=Filters(model=["tiny-sampled"]),
        )
        summary["rl"] = {"rows": report.rows, **report.counts}
    finally:
        from pomona.orchestrator.runtimes.local import LocalRuntime
        from pomona.orchestrator.sdk.shared import close_shared

        close_shared()
        LocalRuntime(state).unmount_store()
        shutil.rmtree(state, ignore_errors=True)
    summary["seconds_total"] = round(time.monotonic() - t0, 1)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
