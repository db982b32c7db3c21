"""The verl exports, run through verl 0.9's own code in verl's own venv (it pins transformers
< 5.11; tests/trainer/verl_venv.sh, built by ./dev setup): MultiTurnSFTDataset on the SFT rows,
RLHFDataset + AgentLoopWorker (with Pomona's RecordedAgentLoop) + NaiveRewardManager (with
Pomona's compute_score) on the RL rows. Asserted: which tokens verl trains."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from pomona.trainer import verl_reward
from pomona.trainer.episodes import load
from pomona.trainer.export import export
from pomona.trainer.samples import samples

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
VERL = REPO / ".cache" / "venvs" / "verl" / "bin" / "python"
CHECK = Path(__file__).with_name("verl_check.py")


def run_verl(model: Path, sft_models: list[Path], sft: Path, rl: Path) -> dict:
    if not VERL.exists():
        pytest.skip(f"verl's venv is missing ({VERL}): ./dev setup builds it")
    config = {"model": str(model), "sft_models": [str(m) for m in sft_models],
              "sft": str(sft / "train.parquet"),
              "rl": str(rl / "train.parquet"), "reward": verl_reward.__file__}  # fmt: skip
    proc = subprocess.run([str(VERL), str(CHECK), json.dumps(config)], capture_output=True,
                          text=True, timeout=800, env={**os.environ, "OMP_NUM_THREADS": "1",
                          "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_verl_trains_the_models_own_tokens(tiny_runs, tiny_model, tojson_model, tmp_path):
    sft = export("sft", tiny_runs, "verl", tmp_path / "sft").path
    rl = export("rl", tiny_runs, "verl", tmp_path / "rl").path
    rows = pq.read_table(rl / "train.parquet").to_pylist()
    episodes = {ep.key: ep for ep in load(tiny_runs)}
    assert {r["reward_model"]["ground_truth"] for r in rows} == {1.0, 0.0}  # numeric, as recorded
    assert all(isinstance(r["reward_model"]["ground_truth"], float) for r in rows)

    result = run_verl(tiny_model, [tiny_model, tojson_model], sft, rl)
    assert (result["verl"], result["transformers"]) == ("0.9.1", "5.10.4")
    tokenizer = AutoTokenizer.from_pretrained(str(tojson_model))

    # SFT: verl renders each message alone (and checks it against the whole conversation).
    # Under the template the model was recorded with, what it trains is each reply exactly as
    # the model sampled it; under a Hermes-style one (arguments always through `| tojson`), the
    # arguments are objects, not JSON text encoded twice; under both, nothing of the tool
    # output, user or system turns
    sft_rows = pq.read_table(sft / "train.parquet").to_pylist()
    own, hermes = result["sft"]
    assert len(own) == len(hermes) == len(sft_rows) == 3  # one conversation, then two (compaction)
    for got, other, row in zip(own, hermes, sft_rows, strict=True):
        ep = episodes[row["extra_info"]["episode"]]
        turns = {t.sequence: t for t in ep.turns}
        trained = [t for t, m in zip(got["input_ids"], got["loss_mask"], strict=True) if m]
        assert trained == [i for c in row["extra_info"]["calls"] for i in turns[c].completion_ids]
        text = tokenizer.decode(
            [t for t, m in zip(other["input_ids"], other["loss_mask"], strict=True) if m]
        )
        assert '"arguments":  {"command": "' in text and '\\"' not in text, text
        for trained_text in (text, tokenizer.decode(trained)):
            assert not {"<|tool|>", "<|user|>", "<|system|>"} & set(
                tokenizer.tokenize(trained_text)
            )

    # RL: verl's worker batches the recorded trajectory as it is: prompt and response ids, the
    # mask on exactly the sampled tokens, the engine's logprobs, the reward on the last token
    by_branch = {(s.episode, s.branch): s for ep in episodes.values() for s in samples(ep)}
    assert len(result["rl"]["rows"]) == len(by_branch) == 3
    for got in result["rl"]["rows"]:
        s = by_branch[(got["episode"], got["branch"])]
        turns = {t.sequence: t for t in episodes[s.episode].turns}
        assert got["prompt_ids"] + got["response_ids"] == s.input_ids
        assert got["prompt_ids"] == turns[s.turns[0]].prompt_ids
        mask = got["response_mask"]
        sampled = [i for c in s.turns for i in turns[c].completion_ids]
        assert [t for t, m in zip(got["response_ids"], mask, strict=True) if m] == sampled
        recorded = [lp for c in s.turns for lp in turns[c].logprobs]
        kept = [lp for lp, m in zip(got["rollout_log_probs"], mask, strict=True) if m]
        assert kept == pytest.approx(recorded, abs=1e-6)
        assert got["rm_scores"][-1] == s.reward and not any(got["rm_scores"][:-1])
    assert result["rl"]["reward_fn_scores"] == [r["reward_model"]["ground_truth"] for r in rows]

    refused = result["rl"]["refusals"]
    assert "prompt tokens exceed the rollout's prompt_length 8" in refused["short_prompt_length"]
    assert refused["string_ground_truth"].startswith("NoRecordedScore")
