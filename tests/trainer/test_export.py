"""Every export format, read back by its consumer's own loader where it installs here (datasets,
TRL; verl's and slime's own code in test_verl_export.py and test_slime_export.py); Orchard data
both ways."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer
from trl.data_utils import is_conversational, maybe_apply_chat_template

from pomona.cli import main
from pomona.trainer import graph, orchard
from pomona.trainer.episodes import Filters, load
from pomona.trainer.export import export

# the session fixtures (harness recordings, a tiny model's SFT run) are set up inside the first
# test's time; on a busy shared 2-core machine that can exceed the suite-wide 300 s
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def sft_exports(recorded: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sft")
    return {
        f: export("sft", recorded, f, root / f).path
        for f in ("hf", "trl", "verl", "slime", "orchard")
    }


def test_sft_exports_load_in_their_consumers(sft_exports, recorded, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    conversations = {ep.key: ep.conversation() for ep in load(recorded)}
    hf = datasets.load_from_disk(str(sft_exports["hf"]))
    trl = datasets.load_dataset(
        "json", data_files=str(sft_exports["trl"] / "train.jsonl"), split="train"
    )
    assert len(hf) == len(trl) == len(conversations) == 3
    for row in hf:
        messages, tools = conversations[row["episode"]]
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in messages]
        assert json.loads(row["tools"]) == tools and row["harness"] and row["reward"] == 1.0
    for dataset in (hf, trl):
        row = dataset[0]
        assert is_conversational(row)
        text = maybe_apply_chat_template({"messages": row["messages"], "tools": json.loads(row["tools"])},
                                         tokenizer)["text"]  # fmt: skip
        assert "<|assistant|>" in text and "<tool_call>" in text
    verl = pq.read_table(sft_exports["verl"] / "train.parquet")
    assert {"messages", "tools", "extra_info"} <= set(verl.column_names)
    assert verl.schema.field("messages").type.value_type.field("role").type == pa.string()
    slime = [
        json.loads(line) for line in (sft_exports["slime"] / "train.jsonl").read_text().splitlines()
    ]
    assert all(r["label"] == "resolved" and r["messages"][-1]["role"] == "assistant" for r in slime)
    manifest = json.loads((sft_exports["hf"] / "pomona-export.json").read_text())
    assert (manifest["kind"], manifest["format"], manifest["episodes"], manifest["rows"]) == (
        "sft",
        "hf",
        3,
        3,
    )


def test_orchard_export_round_trips_and_gui_imports(sft_exports, recorded, tmp_path):
    table = pq.read_table(sft_exports["orchard"] / "train.parquet")
    assert table.schema.equals(orchard.SWE)
    rows = orchard.load(sft_exports["orchard"])
    assert {r["metadata"]["verify_status"] for r in rows} == {"resolved"}
    by_key = {ep.key: graph.build(ep).conversations()[0] for ep in load(recorded)}
    for r in rows:
        conv = by_key[r["metadata"]["episode"]]
        messages, tools = conv.messages, conv.tools
        assert [orchard.swe_message(m) for m in r["messages"]] == [
            orchard.swe_message(m) for m in messages
        ]
        assert r["tools"] == tools
    assert len(orchard.to_dataset(sft_exports["orchard"])) == 3

    gui = tmp_path / "gui" / "train"
    gui.mkdir(parents=True)
    image = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
    pq.write_table(pa.table({
        "messages": [[{"role": "user", "content": "Click Search."}, {"role": "assistant", "content": "click(3, 4)"}]],
        "images": pa.array([[{"bytes": b"\x89PNG...", "path": None}]], pa.list_(image)),
        "reward": [1.0], "status": ["completed"], "metadata": ['{"task": "pae-webvoyager/1"}'],
    }), gui / "part-0.parquet")  # fmt: skip
    (g,) = orchard.load(tmp_path / "gui")
    assert g["messages"][1] == {"role": "assistant", "content": "click(3, 4)"}
    assert g["images"][0]["bytes"] == b"\x89PNG..." and g["metadata"]["task"] == "pae-webvoyager/1"
    with pytest.raises(ValueError, match="missing columns"):
        orchard.load(tmp_path / "gui", "swe")
    with pytest.raises(FileNotFoundError):
        orchard.load(tmp_path / "nowhere")


def test_rl_exports_carry_tokens_masks_and_rewards(recorded, tiny_model, tmp_path):
    tokenizer = str(tiny_model)
    for fmt in ("hf", "verl", "slime"):
        report = export("rl", recorded, fmt, tmp_path / fmt, tokenizer=tokenizer, discount=0.5)
        assert report.counts["rules"] == {"merged": 2, "branched": 3}  # mini, claude; pi's calls
    report = export("rl", recorded, "trl", tmp_path / "trl")  # conversational: no tokens needed
    assert report.counts["calls"] == report.rows == sum(len(e.turns) for e in load(recorded))
    hf = datasets.load_from_disk(str(tmp_path / "hf"))
    for row in hf:
        assert len(row["input_ids"]) == len(row["loss_mask"]) and sum(row["loss_mask"]) > 0
        if row["tokens"] == "recorded":
            assert len(row["logprobs"]) == len(row["input_ids"])
        assert row["advantage"] is None  # three solved attempts at one task: no variance
    assert {r["harness"]: r["drift"] for r in hf if r["harness"] != "claude-code"} == {
        "pi": True,
        "mini-swe-agent": True,
    }  # the byte-level ids are not the tiny tokenizer's

    trl = datasets.load_dataset(
        "json", data_files=str(tmp_path / "trl" / "train.jsonl"), split="train"
    )
    assert all(
        is_conversational(r) and r["completion"][0]["role"] == "assistant" and r["label"]
        for r in trl
    )

    verl = pq.read_table(tmp_path / "verl" / "train.parquet").to_pylist()
    for r in verl:  # what RLHFDataset reads, the trajectory as AgentLoopOutput's fields
        assert set(r) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        loop = r["extra_info"]["agent_loop"]
        truth = r["reward_model"]["ground_truth"]  # the discounted reward: a number
        assert (
            isinstance(truth, float) and truth == loop["reward_score"] == r["extra_info"]["reward"]
        )
        assert len(loop["response_mask"]) == len(loop["response_ids"]) and sum(
            loop["response_mask"]
        )
        # the prompt: what the branch's first call was shown, up to (not including) its reply
        # (Claude Code's last message can be a system reminder)
        assert r["prompt"][-1]["role"] != "assistant" and r["prompt"][0]["role"] == "system"

    for line in (tmp_path / "slime" / "train.jsonl").read_text().splitlines():
        s = json.loads(line)  # test_slime_export.py checks these against slime's Sample
        assert type(s["group_index"]) is int and s["response"] and s["label"] == "resolved"

    dropped = export(
        "rl", recorded, "hf", tmp_path / "dropped", tokenizer=tokenizer, drop_zero_variance=True
    )
    assert dropped.rows == 0


def test_export_refusals_and_the_command_line(recorded, tmp_path, capsys):
    with pytest.raises(ValueError, match="Orchard dataset schema holds conversations"):
        export("rl", recorded, "orchard", tmp_path / "x")
    with pytest.raises(ValueError, match="unknown format"):
        export("sft", recorded, "csv", tmp_path / "x")
    with pytest.raises(ValueError, match="no token ids"):  # Claude Code's calls need a tokenizer
        export("rl", recorded, "hf", tmp_path / "x")

    out = tmp_path / "cli"
    assert main(["export", "rl", "--runs", str(recorded), "--format", "verl", "--out", str(out),
                 "--harness", "pi", "--harness", "mini-swe-agent", "--resolved"]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    assert printed["episodes"] == 2 and printed["rules"] == {"branched": 3, "merged": 1}
    assert (
        main(
            ["export", "sft", "--runs", str(tmp_path / "nope"), "--format", "hf", "--out", str(out)]
        )
        == 2
    )
    assert "no trajectory directory" in capsys.readouterr().err
    assert main(["export", "sft", "--runs", str(recorded), "--format", "trl", "--out", str(out / "u"),
                 "--unresolved"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["rows"] == 0
    assert len(load(recorded, Filters(model=["oracle", "scripted"]))) == 1
