"""Exports of recorded episodes to the formats trainers read.

    sft: one conversation per episode (messages + tools)
    rl:  token-level samples (samples.py) with rewards and group advantages

  format   sft                                   rl
  hf       datasets.save_to_disk: messages,      save_to_disk: input_ids, loss_mask, logprobs,
           tools (JSON text), episode columns    reward, advantage, rule, drift, ...
  trl      train.jsonl, TRL's conversational     train.jsonl, TRL's conversational prompt /
           language-modelling type               completion (+ label, reward, advantage)
  verl     train.parquet: messages, tools        train.parquet: verl's RL columns (data_source,
           (its multi-turn SFT dataset)          prompt, ability, reward_model, extra_info) and its
                                                 batch keys (input_ids, attention_mask, prompts,
                                                 responses, response_mask, rollout_log_probs,
                                                 token_level_scores, advantages)
  slime    train.jsonl: messages, tools, label   train.jsonl: slime Sample dicts (tokens,
                                                 response_length, loss_mask, rollout_log_probs)
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


def _first_assistant(messages: list[dict]) -> int:
    return next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))


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
    group: str


def rl_samples(
    episodes: list[Episode],
    tokenizer: Any = None,
    *,
    discount: float = 1.0,
    drop_zero_variance: bool = False,
) -> list[RLSample]:
    """Samples of every episode, each with its episode's group-normalised advantage (attempts at
    the same task form a group; None where the group does not vary)."""
    advantage = episode_advantages(episodes)
    out: list[RLSample] = []
    for ep in episodes:
        if drop_zero_variance and advantage.get(ep.key) is None:
            continue
        for s in samples(ep, tokenizer, discount=discount):
            s.set_advantage(advantage.get(ep.key))
            out.append(RLSample(s, advantage.get(ep.key), len(out), ep.task))
    return out


def _slime(r: RLSample) -> dict[str, Any]:
    s, p = r.sample, r.sample.prompt_length
    status = "completed" if s.metadata.get("failure_kind") in (None, "none") else "aborted"
    return {
        "group_index": r.group, "index": r.index, "prompt": s.messages[: _first_assistant(s.messages)],
        "tokens": s.input_ids, "response": "", "response_length": s.response_length,
        "label": "resolved" if s.metadata.get("resolved") else "unresolved", "reward": s.reward,
        "loss_mask": s.loss_mask[p:], "rollout_log_probs": None if s.logprobs is None else s.logprobs[p:],
        "status": status, "metadata": {**s.metadata, "episode": s.episode, "task": s.task,
                                       "rule": s.rule, "tokens": s.tokens, "drift": s.drift,
                                       "advantage": r.advantage},
    }  # fmt: skip


def _verl(r: RLSample) -> dict[str, Any]:
    s, p = r.sample, r.sample.prompt_length
    response_mask = s.loss_mask[p:]
    scores = [0.0] * len(response_mask)
    last = max((i for i, m in enumerate(response_mask) if m), default=None)
    if last is not None and s.reward is not None:
        scores[last] = s.reward
    prompt = [
        {"role": m["role"], "content": m["content"]}
        for m in s.messages[: _first_assistant(s.messages)]
    ]
    return {
        "data_source": s.metadata.get("benchmark") or "pomona", "prompt": prompt, "ability": "agent",
        "reward_model": {"style": "rule", "ground_truth": "resolved" if s.metadata.get("resolved") else "unresolved"},
        "extra_info": {"index": r.index, "uid": r.group, "episode": s.episode, "task": s.task,
                       "harness": s.metadata.get("harness"), "model": s.metadata.get("model"),
                       "rule": s.rule, "tokens": s.tokens, "drift": s.drift},
        "input_ids": s.input_ids, "attention_mask": [1] * len(s.input_ids),
        "prompts": s.input_ids[:p], "responses": s.input_ids[p:], "response_mask": response_mask,
        "rollout_log_probs": None if s.logprobs is None else s.logprobs[p:],
        "token_level_scores": scores, "reward": s.reward,
        "advantages": None if r.advantage is None else [r.advantage * m for m in response_mask],
    }  # fmt: skip


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


def write_rl(items: list[RLSample], fmt: str, out: Path) -> None:
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
        _write_jsonl((_slime(r) for r in items), out / "train.jsonl")
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
        write_rl(items, fmt, out)
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
