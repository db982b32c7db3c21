"""The real model on this machine: load time, tokens/s, pi episodes/min, and where an RL step's
time goes (Pomona's sandbox + harness + proxy + recording, the model's generation, TRL's training).

    .venv/bin/python perf/model_bench.py [--model smollm2] [--episodes 6] [--group 2]

Prints one table. Generation is SmolLM2-135M-Instruct (float32, one torch thread) through
`LocalModel`; the episodes are pi on the built-in `files` and `text` tasks through the recording
proxy, greedy; the RL step is one GRPOTrainer step (trainer/online.py) on one task with `--group`
episodes, the top 4 layers trained. A loaded machine slows every row alike: the load average is
printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from pomona.benchmarks import builtin  # noqa: E402
from pomona.proxy import ProxyConfig, ProxyServer  # noqa: E402
from pomona.proxy.local_model import LocalModel  # noqa: E402


def rows(args: argparse.Namespace, state: str) -> list[tuple[str, str, str]]:
    from pomona.episodes.rollouts import rollout
    from pomona.trainer.online import Policy, rl

    out = []
    t0 = time.monotonic()
    model = LocalModel(args.model, max_new_tokens=64)
    out.append(("load (dequantised copy cached)", f"{time.monotonic() - t0:.1f} s", args.model))
    short = model.prompt_ids([{"role": "user", "content": "Write a haiku about the sea."}], [])
    g = model.generate(short, max_new_tokens=64, temperature=0)
    before = model.throughput
    g = model.generate(short, max_new_tokens=64, temperature=0)
    s = model.throughput["seconds"] - before["seconds"]
    out.append(("decode, short prompt", f"{len(g.completion_ids) / s:.1f} tok/s", f"{s:.1f} s"))
    with ProxyServer(ProxyConfig(trajectories=os.path.join(state, "runs"))) as proxy:
        policy = Policy(args.model, proxy, served=model, max_new_tokens=64, trainable_layers=4)
        tasks = (builtin.tasks("files") + builtin.tasks("text"))[: args.episodes]
        before, t0 = model.throughput, time.monotonic()
        records = asyncio.run(rollout(tasks, "pi", "learner-greedy", proxy=proxy,
                                      state_dir=state, concurrency=2, progress=False))  # fmt: skip
        wall = time.monotonic() - t0
        after = model.throughput
        gen = after["seconds"] - before["seconds"]
        resolved = sum(bool(r.resolved) for r in records)
        out.append(("pi episodes (greedy)", f"{len(records) / wall * 60:.2f} episodes/min",
                    f"{len(records)} in {wall:.0f} s, {resolved} resolved"))  # fmt: skip
        sampled, prefilled = (
            after["sampled"] - before["sampled"],
            after["prefilled"] - before["prefilled"],
        )
        out.append(("  generation in them", f"{sampled / gen:.1f} tok/s sampled",
                    f"{gen:.0f} s; {prefilled} prompt tokens computed, the rest from the prefix cache"))  # fmt: skip
        run = rl(policy, tasks[:1], "pi", trajectories=os.path.join(state, "runs"), rounds=1,
                 group=args.group, learning_rate=1e-5, state_dir=state,
                 output_dir=os.path.join(state, "rl"))  # fmt: skip
        sec = run.seconds
        for key, what in (("pomona", "sandbox, harness, proxy, recording"),
                          ("generation", "the model sampling"),
                          ("training", "TRL: logprobs, loss, backward, optimizer"),
                          ("serve_weights", "weights into the served model")):  # fmt: skip
            out.append(
                (f"RL step: {key}", f"{sec[key]:.1f} s ({sec[key] / sec['total']:.0%})", what)
            )
        policy.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--group", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    state = tempfile.mkdtemp(prefix="pomona-model-bench-")
    load = os.getloadavg()[0]
    try:
        table = rows(args, state)
    finally:
        from pomona.orchestrator.runtimes.local import LocalRuntime
        from pomona.orchestrator.sdk.shared import close_shared

        close_shared()
        LocalRuntime(state).unmount_store()
        shutil.rmtree(state, ignore_errors=True)
    width = max(len(r[0]) for r in table)
    print(f"load average at start: {load:.1f} (2 cores)")
    for name, value, note in table:
        print(f"{name.ljust(width)}  {value:<28} {note}")


if __name__ == "__main__":
    main()
