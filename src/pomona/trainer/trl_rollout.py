"""TRL's GRPOTrainer with Pomona's episodes: a `rollout_func` whose completions are real harness
episodes, and the callback that serves each step's weights to the next round.

    rollout = RolloutFunc(tasks, "pi", proxy=proxy, model="policy", tokenizer=rendering)
    trainer = GRPOTrainer(model=model, reward_funcs=[episode_reward], args=GRPOConfig(...),
                          train_dataset=prompts(tasks), rollout_func=rollout,
                          callbacks=[ServeWeights(served)])
    trainer.train()

Each prompt of GRPOTrainer's batch is a task (its instruction, as `prompts(tasks)` writes them);
the trainer repeats it `num_generations` times and this function answers every repeat with one
episode of the harness on the task, through the recording proxy, sampled by the model the
proxy serves under `model`. What it returns is TRL's own rollout contract:

    prompt_ids       the first call's prompt, token for token as the upstream recorded it
    completion_ids   everything after it in the episode's merged sample: each call's sampled
                     tokens and, between them, the tool output and template glue the next prompt
                     added (TRL's multi-turn shape)
    env_mask         1 on tokens the model sampled, 0 on the rest (TRL's own key for this)
    logprobs         the recorded sampling logprob of each completion token (0.0 where masked)
    pomona_reward    the episode's reward (read by `episode_reward`), and its key and version

Fail closed: a turn whose prompt does not extend the previous prompt + completion (a harness
that rewrote its history) ends the sample there, and a turn sampled by another policy version
than the trainer's is masked (stale); both are counted in `stats`. An attempt that failed as
infra (no reward) is all masked and gets its group's mean reward, so it shifts no advantage.
With `bar`, each task's attempts come from Balanced Adaptive Rollout (trainer/bar.py): it
samples in strides until a balanced group of `num_generations` forms; a group it drops is
returned all masked (TRL still counts its rows).

Importing this module loads transformers (and torch): it is for training.

What is TRL's: the batching and repetition of prompts, the group-normalised advantages, the
GRPO/DAPO loss, the optimizer and scheduler, logging. What is Pomona's: the episodes (sandbox,
harness, proxy, recording), the token-exact samples, the reward, BAR, the weight serving.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from pomona import trajectories
from pomona.benchmarks.task import Task
from pomona.errors import Unknown
from pomona.trainer.bar import Attempt, BalancedRollout, BarConfig
from pomona.trainer.episodes import Episode, Filters, load, model_view


def prompts(tasks: Sequence[Task]) -> Any:
    """GRPOTrainer's train_dataset for `tasks`: one conversational prompt per task."""
    import datasets

    return datasets.Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t.instruction}], "task": t.id} for t in tasks]
    )


def episode_reward(prompts: Any, completions: Any, pomona_reward: list[float], **_: Any) -> list:
    """The reward function for GRPOTrainer: each completion's episode reward, as graded."""
    return list(pomona_reward)


@dataclass
class EpisodeTokens:
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    turns: int = 0  # turns in the sample
    dropped_turns: int = 0  # after a history rewrite
    stale_tokens: int = 0  # sampled by another policy version, masked


def versions(directory: str | Path, keys: set[str]) -> dict[tuple[str, int], int | None]:
    """The policy version each recorded main call of these episodes was sampled by."""
    out: dict[tuple[str, int], int | None] = {}
    for row in trajectories.read(directory, "calls").to_pylist():
        if row["episode"] in keys and not row["side"] and row["status"] == "ok":
            _, _, response = model_view(row)
            v = response.get("policy_version") if isinstance(response, dict) else None
            out[(row["episode"], row["sequence"])] = v if isinstance(v, int) else None
    return out


def episode_tokens(
    episode: Episode, version_of: dict[tuple[str, int], int | None], version: int | None
) -> EpisodeTokens | None:
    """The episode as one TRL completion (None when no turn has token ids)."""
    turns = [t for t in episode.turns if t.tokens is not None]
    if not turns:
        return None
    first_prompt, _ = turns[0].tokens  # type: ignore[misc]
    ids: list[int] = list(first_prompt)
    mask: list[int] = [0] * len(ids)
    logprobs: list[float] = [0.0] * len(ids)
    out = EpisodeTokens(list(first_prompt), [], [], [])
    for turn in turns:
        prompt, completion = turn.tokens  # type: ignore[misc]
        if prompt[: len(ids)] != ids:
            out.dropped_turns = len(turns) - out.turns
            break
        glue = list(prompt[len(ids) :])
        ids += glue + list(completion)
        mask += [0] * len(glue)
        logprobs += [0.0] * len(glue)
        fresh = version is None or version_of.get((episode.key, turn.sequence)) == version
        mask += [1 if fresh else 0] * len(completion)
        out.stale_tokens += 0 if fresh else len(completion)
        lp = turn.logprobs if turn.logprobs and len(turn.logprobs) == len(completion) else None
        logprobs += list(lp) if lp is not None and fresh else [0.0] * len(completion)
        out.turns += 1
    n = len(out.prompt_ids)
    out.completion_ids, out.env_mask, out.logprobs = ids[n:], mask[n:], logprobs[n:]
    return out


@dataclass
class RolloutFunc:
    """GRPOTrainer's `rollout_func` (see the module doc). `version()` is the policy version the
    trainer is at (ServeWeights keeps the served model there); default: any version is fresh."""

    tasks: Sequence[Task]
    harness: str
    proxy: Any
    model: str
    tokenizer: Any
    trajectories: Path
    version: Callable[[], int] | None = None
    bar: BarConfig | None = None
    state_dir: str | None = None
    runtime: str | None = "local"
    concurrency: int = 2
    timeout: float = 600
    on_episodes: Callable[[list[Any]], None] | None = None
    stats: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=lambda: {"episodes": 0.0})

    def __post_init__(self) -> None:
        self._by_instruction = {t.instruction: t for t in self.tasks}

    def __call__(self, batch: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        groups: list[tuple[Task, int]] = []
        for prompt in batch:
            task = self._task(prompt)
            if groups and groups[-1][0] is task:
                groups[-1] = (task, groups[-1][1] + 1)
            else:
                groups.append((task, 1))
        t0 = time.monotonic()
        from pomona.episodes.rollouts import blocking

        records = blocking(self._episodes(groups))
        self.seconds["episodes"] += time.monotonic() - t0
        if self.on_episodes is not None:
            self.on_episodes([r for group in records for r in group])
        return self._fields(groups, records)

    def _task(self, prompt: Any) -> Task:
        text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
        if text not in self._by_instruction:
            raise Unknown(f"no task has the instruction {text[:80]!r}: use prompts(tasks)")
        return self._by_instruction[text]

    async def _attempts(self, task: Task, n: int) -> list[Any]:
        from pomona.episodes.rollouts import rollout

        return await rollout([task], self.harness, self.model, n=n, proxy=self.proxy,
                             runtime=self.runtime, state_dir=self.state_dir,
                             concurrency=self.concurrency, timeout=self.timeout,
                             progress=False)  # fmt: skip

    async def _episodes(self, groups: list[tuple[Task, int]]) -> list[list[Any]]:
        """Each task's attempts: n of them, or the group Balanced Adaptive Rollout chose."""
        out = []
        for task, n in groups:
            if self.bar is None:
                out.append(await self._attempts(task, n))
                continue
            bar = BalancedRollout(BarConfig(n, self.bar.max_samples, self.bar.stride,
                                            self.bar.positive))  # fmt: skip
            while k := bar.need():
                bar.add([Attempt.of_record(r) for r in await self._attempts(task, k)])
            result = bar.result()
            self.stats[f"bar_{result.how}"] += 1
            self.stats["bar_attempts"] += len(result.attempts)
            chosen = [a.id for a in result.group]
            if result.dropped:
                self.stats["bar_dropped"] += 1
                for record in chosen:
                    record.failure_message = f"bar: {result.dropped}"  # masked below
            out.append(chosen)
        return out

    def _fields(self, groups: list[tuple[Task, int]], records: list[list[Any]]) -> dict:
        keys = {r.episode for group in records for r in group if r.episode}
        found = {e.key: e for e in load(self.trajectories, Filters(include_failed=True))
                 if e.key in keys}  # fmt: skip
        version = self.version() if self.version is not None else None
        version_of = versions(self.trajectories, keys) if version is not None else {}
        eos = self.tokenizer.eos_token_id
        fields: dict[str, list[Any]] = {k: [] for k in (
            "prompt_ids", "completion_ids", "env_mask", "logprobs", "pomona_reward",
            "pomona_episode", "pomona_version")}  # fmt: skip
        for group in records:
            scored = [r.reward for r in group if r.reward is not None]
            mean = sum(scored) / len(scored) if scored else 0.0
            for record in group:
                tokens = episode_tokens(found[record.episode], version_of, version) if (
                    record.episode in found) else None  # fmt: skip
                masked = record.reward is None or (record.failure_message or "").startswith("bar:")
                if tokens is None or not tokens.completion_ids:
                    tokens = EpisodeTokens([eos], [eos], [0], [0.0])
                    self.stats["no_tokens"] += 1
                if masked:
                    tokens.env_mask = [0] * len(tokens.completion_ids)
                    self.stats["masked_attempts"] += 1
                self.stats["dropped_turns"] += tokens.dropped_turns
                self.stats["stale_tokens"] += tokens.stale_tokens
                self.stats["trained_tokens"] += sum(tokens.env_mask)
                fields["prompt_ids"].append(tokens.prompt_ids)
                fields["completion_ids"].append(tokens.completion_ids)
                fields["env_mask"].append(tokens.env_mask)
                fields["logprobs"].append(tokens.logprobs)
                fields["pomona_reward"].append(mean if record.reward is None else record.reward)
                fields["pomona_episode"].append(record.episode)
                fields["pomona_version"].append(version)
        return fields


class ServeWeights(TrainerCallback):
    """After each optimizer step, the trainer's weights are loaded into the served LocalModel as
    policy version `base + global_step`, between two generations, without restarting anything."""

    def __init__(self, served: Any, base: int = 0):
        self.served, self.base = served, base
        self.seconds = 0.0

    def version(self, state: Any) -> int:
        return self.base + int(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        self.served.update_weights(kwargs["model"].state_dict(), version=self.version(state))
        self.seconds += time.monotonic() - t0
        return control
