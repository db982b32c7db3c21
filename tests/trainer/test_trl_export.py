"""The TRL exports, run through TRL's own SFTTrainer dataset preparation (tokenisation, masks,
labels): which tokens it would train."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from conftest import two_turn_episode
from transformers import AutoModelForCausalLM, AutoTokenizer

from pomona.trainer.episodes import Filters, load
from pomona.trainer.export import export

pytestmark = pytest.mark.timeout(900)

CHAT = Filters(harness=["pi", "mini-swe-agent"])  # Claude Code's system prompt alone is ~15k tokens


def prepared(path: Path, model: Path, tmp_path: Path) -> tuple[datasets.Dataset, object]:
    """The exported train.jsonl as SFTTrainer prepares it (assistant-only loss)."""
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    data = datasets.load_dataset("json", data_files=str(path / "train.jsonl"), split="train")
    config = SFTConfig(output_dir=str(tmp_path / "trl"), assistant_only_loss=True, report_to=[],
                       use_cpu=True, max_length=None, dataset_num_proc=None)  # fmt: skip
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(model)), args=config,
                         train_dataset=data, processing_class=tokenizer)  # fmt: skip
    return trainer.train_dataset, tokenizer


def trained(row: dict) -> list[int]:
    return [t for t, label in zip(row["input_ids"], row["labels"], strict=True) if label != -100]


def test_sft_rows_train_the_models_replies_with_object_arguments(recorded, tojson_model, tmp_path):
    path = export("sft", recorded, "trl", tmp_path / "sft", filters=CHAT).path
    rows = [json.loads(line) for line in (path / "train.jsonl").read_text().splitlines()]
    for row in rows:
        for m in row["messages"]:
            for c in m.get("tool_calls") or []:
                assert isinstance(c["function"]["arguments"], dict)
    ds, tokenizer = prepared(path, tojson_model, tmp_path)
    assert len(ds) == len(rows) == 2
    for row, source in zip(ds, rows, strict=True):
        text = tokenizer.decode(trained(row))
        assert '"arguments":  {"command": "echo hello > hello.txt"}}' in text, text
        assert '\\"' not in text and "<|tool|>" not in text and "<|user|>" not in text
        replies = [m for m in source["messages"] if m["role"] == "assistant"]
        assert text.count("<|end|>") == len(replies)  # every reply, nothing else


def test_per_call_rl_rows_complete_each_call_with_its_own_reply(
    recorded, tiny_model, tojson_model, tmp_path
):
    path = export("rl", recorded, "trl", tmp_path / "rl", filters=CHAT).path
    rows = [json.loads(line) for line in (path / "train.jsonl").read_text().splitlines()]
    episodes = {ep.key: ep for ep in load(recorded, CHAT)}
    assert len(rows) == sum(len(ep.turns) for ep in episodes.values())
    for row in rows:
        turn = next(t for t in episodes[row["episode"]].turns if t.sequence == row["call"])
        assert [m["role"] for m in row["prompt"]] == [m["role"] for m in turn.messages]
        (reply,) = row["completion"]  # the call's own reply, no tool output after it
        assert reply["role"] == "assistant"
    ds, tokenizer = prepared(path, tojson_model, tmp_path)
    later = 0
    for row, source in zip(ds, rows, strict=True):
        text = tokenizer.decode(trained(row))
        assert "<|tool|>" not in text and "<|user|>" not in text and text.endswith("<|end|>")
        assert text.count("<|end|>") == 1
        later += source["prompt"][-1]["role"] == "tool"  # a later call: its prompt has tool output
    assert later >= 2

    # calls the tiny model answered: what TRL trains for each call is exactly the token ids the
    # model sampled
    runs = tmp_path / "tiny-runs"
    two_turn_episode(tiny_model, runs)
    (ep,) = load(runs)
    path = export("rl", runs, "trl", tmp_path / "tiny-rl").path
    ds, _ = prepared(path, tiny_model, tmp_path)
    assert [trained(r) for r in ds] == [t.completion_ids for t in ep.turns]
