"""Exports of recorded episodes to the formats trainers read.

    sft: one conversation per episode (messages + tools)
    rl:  token-level samples (samples.py) with rewards and group advantages

  format   sft                                   rl
  hf       datasets.save_to_disk: messages,      save_to_disk: input_ids, loss_mask, logprobs,
           tools (JSON text), episode columns    reward, advantage, rule, drift, ...
  trl      train.jsonl, TRL's conversational     train.jsonl, one row per call: TRL's
           language-modelling type               conversational prompt / completion
  verl     train.parquet: messages, tools        train.parquet: what RLHFDataset reads (data_source,
           (its MultiTurnSFTDataset)             prompt, ability, reward_model with the numeric
                                                 reward, extra_info) and, in extra_info.agent_loop,
                                                 the fields of verl's AgentLoopOutput
  slime    train.jsonl: messages, tools, label   train.jsonl and rollout_data/0.pt: slime `Sample`
                                                 dicts (tokens, response text, response_length,
                                                 loss_mask, rollout_log_probs, int group_index)
  orchard  train.parquet in the Orchard          (refused: Orchard's schema holds conversations)
           dataset's `swe` schema

Every export also writes `pomona-export.json`: what was exported, from where, and counts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.trainer import graph as graphs
from pomona.trainer import onpolicy, orchard
from pomona.trainer.advantages import groups
from pomona.trainer.episodes import Episode, Filters, load
from pomona.trainer.samples import TokenSample, samples

FORMATS = ("hf", "trl", "verl", "slime", "orchard")
KINDS = ("sft", "rl")
MANIFEST = "pomona-export.json"


@dataclass
class ExportReport:
    path: Path
    kind: str
    format: str
    episodes: int
    rows: int
    counts: dict[str, Any] = field(default_factory=dict)


def _meta(ep: Episode) -> dict[str, Any]:
    row = ep.row
    return {
        "episode": ep.key,
        "task": ep.task,
        "benchmark": row.get("benchmark"),
        "harness": row.get("harness"),
        "model": row.get("model"),
        "reward": ep.reward,
        "resolved": ep.resolved,
        "verify_status": "resolved" if ep.resolved else "unresolved",
    }


# --- sft ----------------------------------------------------------------------------------------


def sft_rows(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """One row per conversation of each episode's graph: the assistant turns as the upstream
    returned them, tool-call arguments as objects."""
    rows = []
    for ep in episodes:
        for conv in graphs.build(ep).conversations():
            rows.append({
                "messages": [graphs.with_object_arguments(m) for m in conv.messages],
                "tools": conv.tools,
                "metadata": _meta(ep) | {"calls": conv.calls, "shared_calls": conv.shared,
                                         "unverified_assistant_messages": conv.unverified},
            })  # fmt: skip
    return rows


def _write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_sft(rows: list[dict[str, Any]], fmt: str, out: Path) -> None:
    if fmt == "orchard":  # Orchard's schema: every field a string, arguments JSON text
        orchard.write_swe(
            [orchard.swe_row(r["messages"], r["tools"], r["metadata"]) for r in rows],
            out / "train.parquet",
        )
    elif fmt == "hf":
        import datasets

        datasets.Dataset.from_list(
            [
                {"messages": r["messages"], "tools": json.dumps(r["tools"]), **r["metadata"]}
                for r in rows
            ]  # fmt: skip
        ).save_to_disk(str(out))
    elif fmt == "trl":  # TRL decodes tools given as JSON text; arguments stay objects
        _write_jsonl(
            ({"messages": r["messages"], "tools": json.dumps(r["tools"])} for r in rows),
            out / "train.jsonl",
        )
    elif fmt == "verl":  # MultiTurnSFTDataset hands messages and tools to the template as read
        _write_parquet(
            [
                {"messages": r["messages"], "tools": r["tools"], "extra_info": r["metadata"]}
                for r in rows
            ],  # fmt: skip
            out / "train.parquet",
        )
    elif fmt == "slime":
        _write_jsonl(({"messages": r["messages"], "tools": r["tools"],
                       "label": r["metadata"]["verify_status"], "metadata": r["metadata"]}
                      for r in rows), out / "train.jsonl")  # fmt: skip
    else:
        raise graphs.TrainingDataError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")


# --- rl -----------------------------------------------------------------------------------------


@dataclass
class RLSample:
    sample: TokenSample
    advantage: float | None
    index: int
    group: str  # the task: attempts at it form a group
    group_index: int  # the task's number in this export
    rollout: int  # the episode's number in this export (its branches share it)
    prompt: list[dict[str, Any]]  # the messages the branch's first call was shown


def rl_samples(
    episodes: list[Episode],
    tokenizer: Any = None,
    *,
    discount: float = 1.0,
    drop_zero_variance: bool = False,
) -> list[RLSample]:
    """Samples of every episode, each with its episode's group-normalised advantage (attempts at
    the same task form a group; None where the group does not vary), a group's samples next to
    each other (trainers that reshape rewards by group size read them so)."""
    advantage = episode_advantages(episodes)
    tasks: dict[str, int] = {}
    for ep in episodes:
        tasks.setdefault(ep.task, len(tasks))
    out: list[RLSample] = []
    rollouts = 0
    for ep in sorted(episodes, key=lambda e: tasks[e.task]):
        if drop_zero_variance and advantage.get(ep.key) is None:
            continue
        turns = {t.sequence: t for t in ep.turns}
        for s in samples(ep, tokenizer, discount=discount):
            s.set_advantage(advantage.get(ep.key))
            prompt = [graphs.with_object_arguments(m) for m in turns[s.turns[0]].messages]
            out.append(RLSample(s, advantage.get(ep.key), len(out), ep.task, tasks[ep.task],
                                rollouts, prompt))  # fmt: skip
        rollouts += 1
    return out


def _response_start(s: TokenSample) -> int:
    """Where the response begins: after the prompt of the branch's first call (its completion's
    start), so prompt + response is the sample and every later call's prompt is response."""
    return s.spans[0][1] if s.spans else s.prompt_length


def _response_text(s: TokenSample, tokenizer: Any) -> str:
    """The response as text: its tokens decoded where a tokenizer is given, else the messages
    after the prompt (replies as the upstream returned them, tool output as the harness sent)."""
    start = _response_start(s)
    if tokenizer is not None:
        return str(tokenizer.decode(s.input_ids[start:]))
    prompt = next((i for i, m in enumerate(s.messages) if m.get("role") == "assistant"), 0)
    parts = []
    for m in s.messages[prompt:]:
        parts.append(str(m.get("content") or ""))
        parts.extend(json.dumps({"name": c["function"]["name"],
                                 "arguments": graphs.arguments_object(c["function"].get("arguments"))})
                     for c in m.get("tool_calls") or [])  # fmt: skip
    return "\n".join(p for p in parts if p)


def slime_sample(r: RLSample, tokenizer: Any) -> dict[str, Any]:
    """slime's `Sample` (slime/utils/types.py), as `Sample.to_dict` writes it. The branches of
    one episode share a `rollout_id` (slime's rule for a rollout split into several samples);
    `group_index` numbers the task, `index` the sample."""
    s, p = r.sample, _response_start(r.sample)
    status = "completed" if s.metadata.get("failure_kind") in (None, "none") else "aborted"
    return {
        "group_index": r.group_index, "index": r.index, "rollout_id": r.rollout,
        "prompt": r.prompt, "tokens": s.input_ids,
        "response": _response_text(s, tokenizer), "response_length": len(s.input_ids) - p,
        "label": "resolved" if s.metadata.get("resolved") else "unresolved", "reward": s.reward,
        "loss_mask": s.loss_mask[p:], "rollout_log_probs": None if s.logprobs is None else s.logprobs[p:],
        "status": status, "metadata": {**s.metadata, "episode": s.episode, "task": s.task,
                                       "branch": s.branch, "calls": s.turns, "rule": s.rule, "tokens": s.tokens,
                                       "drift": s.drift, "advantage": r.advantage,
                                       "response_text": "decoded" if tokenizer is not None else "messages"},
    }  # fmt: skip


def _write_slime_rollout(rows: list[dict[str, Any]], path: Path) -> None:
    """The rows as slime saves a rollout (`--save-debug-rollout-data`) and trains on one again
    without generating (`--load-debug-rollout-data PATH`): torch.save of {rollout_id, samples}."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": 0, "samples": rows}, path)


def _verl(r: RLSample) -> dict[str, Any]:
    """verl's RL row (what RLHFDataset reads: data_source, prompt, ability, reward_model,
    extra_info) with the recorded trajectory in `extra_info["agent_loop"]`: the fields of verl's
    AgentLoopOutput (prompt_ids, response_ids, response_mask, response_logprobs, reward_score),
    which `pomona.trainer.verl_agent_loop.RecordedAgentLoop` hands to verl as they are."""
    s = r.sample
    reward = None if s.reward is None else float(s.reward)
    return {
        "data_source": s.metadata.get("benchmark") or "pomona", "prompt": r.prompt,
        "ability": "agent", "reward_model": {"style": "rule", "ground_truth": reward},
        "extra_info": {"index": r.index, "uid": r.group, "episode": s.episode, "task": s.task,
                       "branch": s.branch, "calls": s.turns, "harness": s.metadata.get("harness"),
                       "model": s.metadata.get("model"), "rule": s.rule, "tokens": s.tokens,
                       "drift": s.drift, "reward": reward, "advantage": r.advantage,
                       "agent_loop": agent_loop_fields(s)},
    }  # fmt: skip


def agent_loop_fields(s: TokenSample) -> dict[str, Any]:
    """A sample as the fields of verl's AgentLoopOutput: the prompt of the branch's first call,
    the rest as the response, masked in only where the policy sampled."""
    p = _response_start(s)
    return {"prompt_ids": s.input_ids[:p], "response_ids": s.input_ids[p:],
            "response_mask": s.loss_mask[p:],
            "response_logprobs": None if s.logprobs is None else s.logprobs[p:],
            "reward_score": None if s.reward is None else float(s.reward),
            "num_turns": len(s.messages)}  # fmt: skip


def _flat(r: RLSample) -> dict[str, Any]:
    s = r.sample
    return {
        "input_ids": s.input_ids, "loss_mask": s.loss_mask, "logprobs": s.logprobs,
        "reward": s.reward, "advantage": r.advantage, "group": r.group, "rule": s.rule,
        "tokens": s.tokens, "drift": s.drift, "drift_detail": s.drift_detail,
        "episode": s.episode, "task": s.task, "turns": s.turns, "branch": s.branch,
        "context": s.context, "advantages": s.advantages,
        "lineage": None if s.lineage is None else json.dumps(dataclasses.asdict(s.lineage)),
        "sampling": json.dumps({str(c): v for c, v in s.sampling.items()}),
        "harness": s.metadata.get("harness"), "model": s.metadata.get("model"),
        "resolved": s.metadata.get("resolved"),
    }  # fmt: skip


def trl_rows(episodes: list[Episode], advantage: dict[str, float | None],
             discount: float = 1.0) -> list[dict[str, Any]]:  # fmt: skip
    """TRL's conversational prompt/completion rows, one per policy call: the prompt is what the
    model was shown for that call, the completion its own reply as the upstream returned it
    (never the tool output or earlier turns that follow it in the harness's history)."""
    rows = []
    for ep in episodes:
        n = len(ep.turns)
        for i, turn in enumerate(ep.turns):
            reward = None if ep.reward is None else ep.reward * discount ** (n - 1 - i)
            rows.append({
                "prompt": [graphs.with_object_arguments(m) for m in turn.messages],
                "completion": [graphs.with_object_arguments(turn.reply)],
                "tools": json.dumps(turn.tools),
                "label": bool(reward and reward > 0), "reward": reward,
                "advantage": advantage.get(ep.key), "episode": ep.key, "call": turn.sequence,
                "task": ep.task, "group": ep.task,
            })  # fmt: skip
    return rows


def episode_advantages(episodes: list[Episode]) -> dict[str, float | None]:
    """Each episode's group-normalised advantage (attempts at one task form a group)."""
    advantage: dict[str, float | None] = {}
    for g in groups(episodes, key=lambda e: e.task, reward=lambda e: e.reward):
        for ep in g.members + g.excluded:
            advantage[ep.key] = g.advantage_of(ep)
    return advantage


def write_rl(items: list[RLSample], fmt: str, out: Path, tokenizer: Any = None) -> None:
    """Token samples in `fmt` (trl's rows are conversational: `trl_rows`)."""
    if fmt == "orchard":
        raise graphs.TrainingDataError(
            "the Orchard dataset schema holds conversations, not token samples: "
            "export sft --format orchard, or rl in hf, trl, verl or slime"
        )
    if fmt == "hf":
        import datasets

        datasets.Dataset.from_list([_flat(r) for r in items]).save_to_disk(str(out))
    elif fmt == "verl":
        _write_parquet([_verl(r) for r in items], out / "train.parquet")
    elif fmt == "slime":
        rows = [slime_sample(r, tokenizer) for r in items]
        _write_jsonl(rows, out / "train.jsonl")
        _write_slime_rollout(rows, out / "rollout_data" / "0.pt")
    else:
        raise graphs.TrainingDataError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")


# --- the entry point ---------------------------------------------------------------------------


def export(
    kind: str,
    runs: str | os.PathLike[str] | list[str | os.PathLike[str]],
    fmt: str,
    out: str | os.PathLike[str],
    *,
    filters: Filters | None = None,
    tokenizer: Any = None,
    discount: float = 1.0,
    drop_zero_variance: bool = False,
) -> ExportReport:
    """Export the episodes of `runs` that pass `filters` as `kind` data in `fmt` under `out`."""
    if kind not in KINDS:
        raise graphs.TrainingDataError(f"unknown export kind {kind!r}; choose sft or rl")
    if fmt not in FORMATS:
        raise graphs.TrainingDataError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if kind == "rl" and fmt == "orchard":
        write_rl([], fmt, Path(out))  # raises the explanation
    if isinstance(tokenizer, str | os.PathLike):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    episodes = load(runs, filters)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, Any] = {}
    if kind == "sft":
        rows = sft_rows(episodes)
        write_sft(rows, fmt, out)
        n = len(rows)
    elif fmt == "trl":
        advantage = episode_advantages(episodes)
        kept = [e for e in episodes if not drop_zero_variance or advantage.get(e.key) is not None]
        trl = trl_rows(kept, advantage, discount)
        _write_jsonl(trl, out / "train.jsonl")
        n = len(trl)
        counts = {"calls": n, "with_advantage": sum(r["advantage"] is not None for r in trl)}
    else:
        items = rl_samples(
            episodes, tokenizer, discount=discount, drop_zero_variance=drop_zero_variance
        )
        write_rl(items, fmt, out, tokenizer)
        n = len(items)
        counts = {
            "rules": dict(Counter(r.sample.rule for r in items)),
            "tokens": dict(Counter(r.sample.tokens for r in items)),
            "drift": sum(bool(r.sample.drift) for r in items),
            "with_advantage": sum(r.advantage is not None for r in items),
            "on_policy": {
                k: v.as_dict() for k, v in onpolicy.report(r.sample for r in items).items()
            },
        }
    report = ExportReport(out, kind, fmt, len(episodes), n, counts)
    manifest = {"kind": kind, "format": fmt, "runs": [str(r) for r in (runs if isinstance(runs, list) else [runs])],
                "episodes": report.episodes, "rows": n, **counts}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return report
