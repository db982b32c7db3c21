"""The curriculum result: SmolLM2-135M-Instruct trained online on CPU, inside the real pi harness.

    .venv/bin/python examples/online_rl.py [--out DIR] [--words 2] [--rounds 2]

1. record: the oracle (the scripted model replaying each task's gold command) drives pi on the
   curriculum's training variants (trainer/curriculum.py), through the recording proxy;
2. held-out success of the model as shipped (greedy), on variants whose file names and words no
   training task uses;
3. SFT with TRL's SFTTrainer on those oracle episodes, rendered as the served model sees them;
   the result served as policy version 1 (no restart); held-out success again;
4. RL: TRL's GRPOTrainer whose rollout_func plays pi episodes sampled by the served policy,
   groups chosen by Balanced Adaptive Rollout, each step's weights served as the next version;
   held-out success again.

Each phase's figures are appended to DIR/result.json as they come, so a run cut short keeps
what it measured. The held-out tasks are never trained on and the settings were fixed before
the first run (nothing here is tuned on them).
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
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from pomona import gym as pomona_gym  # noqa: E402
from pomona.proxy import ProxyConfig, ProxyServer  # noqa: E402
from pomona.trainer import curriculum  # noqa: E402
from pomona.trainer.bar import BarConfig  # noqa: E402
from pomona.trainer.online import Policy, evaluate, rl, sft_on  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="pomona-online-rl")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--harness", default="pi")
    parser.add_argument("--words", type=int, default=2, help="training words per family")
    parser.add_argument("--held-out", type=int, default=1, help="held-out words per family")
    parser.add_argument("--sft-steps", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=2, help="GRPO steps")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--trainable-layers", type=int, default=8)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    train, held_out = curriculum.train(args.words), curriculum.held_out(args.held_out)
    state = tempfile.mkdtemp(prefix="pomona-online-")
    result: dict[str, Any] = {"model": args.model, "harness": args.harness,
                              "train_tasks": len(train), "held_out_tasks": len(held_out),
                              "settings": vars(args)}  # fmt: skip
    t0 = time.monotonic()

    def note(key: str, value: Any) -> None:
        result[key] = value
        result["seconds_total"] = round(time.monotonic() - t0, 1)
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        print(key, json.dumps(value), flush=True)

    try:
        with ProxyServer(ProxyConfig(trajectories=out / "runs-oracle")) as proxy:
            records = asyncio.run(pomona_gym.rollout(train, args.harness, "oracle", proxy=proxy,
                                                     state_dir=state, progress=False))  # fmt: skip
        note(
            "oracle", {"resolved": sum(bool(r.resolved) for r in records), "episodes": len(records)}
        )
        with ProxyServer(ProxyConfig(trajectories=out / "runs")) as proxy:
            policy = Policy(args.model, proxy, max_new_tokens=96,
                            trainable_layers=args.trainable_layers)  # fmt: skip
            try:
                note("before_sft", evaluate(policy, held_out, args.harness, state_dir=state))
                note("sft", sft_on(policy, out / "runs-oracle", steps=args.sft_steps,
                                   learning_rate=1e-4, output_dir=out / "sft"))  # fmt: skip
                note("after_sft", evaluate(policy, held_out, args.harness, state_dir=state))
                run = rl(policy, train, args.harness, trajectories=out / "runs",
                         rounds=args.rounds, group=args.group, learning_rate=2e-5,
                         bar=BarConfig(n=args.group, max_samples=2 * args.group,
                                       stride=args.group),
                         state_dir=state, output_dir=out / "rl")  # fmt: skip
                note("rl", {"steps": run.steps, "versions": run.versions, "stats": run.stats,
                            "seconds": {k: round(v, 1) for k, v in run.seconds.items()},
                            "log": run.log})  # fmt: skip
                note("after_rl", evaluate(policy, held_out, args.harness, state_dir=state))
            finally:
                policy.close()
    finally:
        from pomona.orchestrator.runtimes.local import LocalRuntime
        from pomona.orchestrator.sdk.shared import close_shared

        close_shared()
        LocalRuntime(state).unmount_store()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
