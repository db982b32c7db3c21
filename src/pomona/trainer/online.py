"""The online loop on one machine: a model served through the recording proxy, episodes of real
harnesses, training steps by TRL, and each step's weights served to the next round.

    policy = Policy("smollm2", proxy)            # served as `learner` (sampled) and `learner-greedy`
    before = evaluate(policy, held_out, "pi", proxy)
    sft_on(policy, oracle_runs)                  # Orchard's order: SFT on oracle episodes first,
    rl(policy, tasks, "pi", proxy, rounds=2)     # then GRPO (TRL) with BAR groups
    after = evaluate(policy, held_out, "pi", proxy)

`Policy` holds two copies of the weights: the trainer's (`train_model`, which TRL updates) and
the served one (`served`, a LocalModel behind its own server, reached by the proxy like any
vLLM upstream). After SFT and after every RL step the trainer's weights are loaded into the
served copy under its generation lock and the policy version goes up: no restart, and every
recorded call says which version sampled it (`policy_version` in the upstream's answer).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.task import Task
from pomona.proxy.config import ModelRoute
from pomona.proxy.local_model import LocalModel, LocalModelServer, load_causal_lm
from pomona.trainer.bar import BarConfig
from pomona.trainer.episodes import Episode, Filters, load
from pomona.trainer.trl_rollout import RolloutFunc, ServeWeights, episode_reward, prompts


class Policy:
    """A model being trained online: its trainer copy, and its served copy on the proxy under
    `name` (sampled at `temperature`) and `name-greedy` (temperature 0)."""

    def __init__(
        self,
        source: str | os.PathLike[str],
        proxy: Any,
        *,
        name: str = "learner",
        temperature: float = 1.0,
        max_new_tokens: int = 96,
        trainable_layers: int | None = None,
        served: LocalModel | None = None,
    ):
        """`served`: an already loaded copy of `source` to serve (default: one of its own)."""
        self.name, self.proxy = name, proxy
        self.served = served or LocalModel(source, name=name)
        self.served.max_new_tokens = max_new_tokens
        self.tokenizer = self.served.rendering  # renders as the server does (toolcall.py)
        _, self.train_model = load_causal_lm(source)
        freeze_below(self.train_model, trainable_layers)
        self.servers = []
        for route, t in ((name, temperature), (f"{name}-greedy", 0.0)):
            server = LocalModelServer(self.served.variant(name=route, temperature=t)).start()
            self.servers.append(server)
            proxy.config.models.append(ModelRoute.from_entry({"model_name": route,
                "litellm_params": {"model": f"hosted_vllm/{route}", "api_base": f"{server.url}/v1",
                                   "api_key": "local"}}))  # fmt: skip

    @property
    def version(self) -> int:
        return self.served.version

    def publish(self) -> int:
        """Serve the trainer's weights as the next policy version; returns it."""
        return self.served.update_weights(self.train_model.state_dict())

    def close(self) -> None:
        for server in self.servers:
            server.stop()


def freeze_below(model: Any, trainable_layers: int | None) -> None:
    """Train only the top `trainable_layers` decoder layers and the final norm (None: all). On a
    CPU this is what makes a step affordable: backward stops at the lowest trainable layer."""
    if trainable_layers is None:
        return
    layers = model.model.layers
    for p in model.parameters():
        p.requires_grad_(False)
    for module in [*layers[len(layers) - trainable_layers :], model.model.norm]:
        for p in module.parameters():
            p.requires_grad_(True)


def sft_rows(episodes: Sequence[Episode], tokenizer: Any) -> Any:
    """Tokenized SFT rows (`input_ids`, `assistant_masks`) of recorded episodes, rendered the
    way the served model is shown a conversation (`tokenizer` = LocalModel.rendering): each
    assistant turn's tokens up to and with its end token trained, everything else masked."""
    import datasets

    def ids(messages: list[dict[str, Any]], tools: list[dict[str, Any]], prompt: bool) -> list:
        return list(tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=prompt, return_dict=True)["input_ids"])  # fmt: skip

    rows = []
    eos = tokenizer.eos_token_id
    for ep in episodes:
        messages, tools = ep.conversation()
        full = ids(messages, tools, False)
        mask = [0] * len(full)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            start, end = (
                len(ids(messages[:i], tools, True)),
                len(ids(messages[: i + 1], tools, False)),
            )
            region = full[start:end]
            stop = max((j for j, t in enumerate(region) if t == eos), default=len(region) - 1)
            mask[start : start + stop + 1] = [1] * (stop + 1)
        if any(mask):
            rows.append({"input_ids": full, "assistant_masks": mask})
    return datasets.Dataset.from_list(rows)


def sft_on(
    policy: Policy, runs: str | os.PathLike[str], *, steps: int = 60, learning_rate: float = 5e-5,
    batch_size: int = 1, output_dir: str | os.PathLike[str] = "pomona-sft",
) -> dict[str, Any]:  # fmt: skip
    """TRL's SFTTrainer on the resolved episodes recorded in `runs` (the oracle's), then the
    result served as the next policy version."""
    from pomona.trainer.train import sft

    t0 = time.monotonic()
    episodes = load(runs, Filters(resolved=True))
    data = sft_rows(episodes, policy.tokenizer)
    result = sft(data, policy.train_model, output_dir, tokenizer=policy.served.tokenizer,
                 steps=steps, learning_rate=learning_rate, batch_size=batch_size,
                 max_length=None, save=False)  # fmt: skip
    version = policy.publish()
    return {"episodes": len(episodes), "rows": len(data), "steps": result.steps,
            "loss_first": result.losses[0], "loss_last": result.losses[-1],
            "version": version, "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


@dataclass
class RLResult:
    steps: int
    versions: list[int]
    stats: dict[str, int]
    seconds: dict[str, float]
    log: list[dict[str, Any]] = field(default_factory=list)


def rl(
    policy: Policy,
    tasks: Sequence[Task],
    harness: str,
    *,
    trajectories: str | os.PathLike[str],
    rounds: int = 1,
    group: int = 4,
    tasks_per_round: int = 1,
    bar: BarConfig | None = None,
    learning_rate: float = 1e-5,
    state_dir: str | None = None,
    concurrency: int = 2,
    timeout: float = 600,
    output_dir: str | os.PathLike[str] = "pomona-rl",
    seed: int = 0,
) -> RLResult:
    """`rounds` GRPO steps by TRL's GRPOTrainer, each on `tasks_per_round` tasks x `group`
    episodes of `harness` sampled by the served policy; after each step the new weights are
    served as the next version, and calls of another version are masked (trl_rollout.py)."""
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    sync = ServeWeights(policy.served, base=policy.version)
    rollout = RolloutFunc(tasks, harness, policy.proxy, policy.name, policy.tokenizer,
                          Path(trajectories), version=lambda: sync.version(trainer.state), bar=bar,
                          state_dir=state_dir, concurrency=concurrency, timeout=timeout)  # fmt: skip
    config = GRPOConfig(
        output_dir=str(output_dir), max_steps=rounds, learning_rate=learning_rate,
        per_device_train_batch_size=group * tasks_per_round, num_generations=group,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, beta=0.0,
        gradient_checkpointing=False,  # TRL's default: recomputing the forward doubles a CPU step
        max_completion_length=None, logging_steps=1, save_strategy="no", report_to=[],
        use_cpu=True, seed=seed, disable_tqdm=True, dataloader_num_workers=0, lr_scheduler_type="constant",
    )  # fmt: skip
    trainer = GRPOTrainer(model=policy.train_model, reward_funcs=[episode_reward], args=config,
                          train_dataset=prompts(tasks), processing_class=policy.served.tokenizer,
                          rollout_func=rollout, callbacks=[sync])  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    t0, generating = time.monotonic(), policy.served.throughput["seconds"]
    trainer.train()
    total = time.monotonic() - t0
    generation = policy.served.throughput["seconds"] - generating
    seconds = {"total": total, "episodes": rollout.seconds["episodes"], "generation": generation,
               "serve_weights": sync.seconds}  # fmt: skip
    # what the episodes cost beyond the model's own generation: sandbox, harness, proxy, recording
    seconds["pomona"] = seconds["episodes"] - generation
    seconds["training"] = total - seconds["episodes"] - sync.seconds
    log = [h for h in trainer.state.log_history if "loss" in h]
    versions = list(range(sync.base + 1, sync.base + trainer.state.global_step + 1))
    return RLResult(trainer.state.global_step, versions, dict(rollout.stats), seconds, log)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def evaluate(
    policy: Policy, tasks: Sequence[Task], harness: str, *, greedy: bool = True, n: int = 1,
    state_dir: str | None = None, concurrency: int = 2, timeout: float = 600,
) -> dict[str, Any]:  # fmt: skip
    """Success of the served policy on `tasks`: resolved of scored episodes, its Wilson
    interval, infra failures apart (never a 0)."""
    from pomona.episodes.rollouts import blocking, rollout

    model = f"{policy.name}-greedy" if greedy else policy.name
    t0 = time.monotonic()
    records = blocking(rollout(tasks, harness, model, n=n, proxy=policy.proxy,
                                  state_dir=state_dir, concurrency=concurrency, timeout=timeout,
                                  progress=False))  # fmt: skip
    scored = [r for r in records if r.reward is not None]
    resolved = sum(bool(r.resolved) for r in scored)
    low, high = wilson(resolved, len(scored))
    return {"version": policy.version, "episodes": len(records), "scored": len(scored),
            "resolved": resolved, "rate": resolved / len(scored) if scored else None,
            "ci95": [round(low, 3), round(high, 3)],
            "infra": {r.task: r.failure_kind for r in records if r.reward is None},
            "by_task": {r.task: bool(r.resolved) for r in scored},
            "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip
