"""The slime export: `Sample` dicts (train.jsonl) and the rollout file slime trains on without
generating (`--load-debug-rollout-data DIR/rollout_data/0.pt`).

slime is not on PyPI (the name belongs to another project), npm or Debian, so no set-up can
install it. Checked always: the rows against `Sample`'s fields and types as slime's source
defines them (slime/utils/types.py at THUDM/slime 624b824, 2026-08-21). Checked with the real
class and loader when a slime checkout is given (POMONA_SLIME_SRC=DIR): slime's own
`load_debug_rollout_data` reads the file into `Sample`s through `Sample.from_dict`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from pomona.trainer.episodes import load
from pomona.trainer.export import export

pytestmark = pytest.mark.timeout(900)

# slime's Sample (slime/utils/types.py at 624b824): field -> the types its annotation allows
SAMPLE = {
    "group_index": (int, type(None)), "index": (int, type(None)), "rollout_id": (int, type(None)),
    "prompt": (str, list), "tokens": (list,), "response": (str,), "response_length": (int,),
    "label": (str, type(None)), "reward": (float, dict, type(None)), "loss_mask": (list, type(None)),
    "rollout_log_probs": (list, type(None)), "status": (str,), "metadata": (dict,),
}  # fmt: skip
OTHER_FIELDS = {
    "multimodal_inputs", "multimodal_train_inputs", "multimodal_train_input_id",
    "apply_chat_template_kwargs", "weight_versions", "rollout_top_p_token_ids",
    "rollout_top_p_token_offsets", "rollout_routed_experts", "remove_sample", "teacher_log_probs",
    "generate_function_path", "custom_rm_path", "train_metadata", "session_id",
    "non_generation_time", "spec_info", "prefix_cache_info",
}  # fmt: skip
STATUSES = {"pending", "completed", "truncated", "aborted", "failed"}


@pytest.fixture(scope="module")
def exported(tiny_runs: Path, tiny_model: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("slime")
    return {
        "decoded": export(
            "rl", tiny_runs, "slime", root / "decoded", tokenizer=str(tiny_model)
        ).path,
        "messages": export("rl", tiny_runs, "slime", root / "messages").path,
    }


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "train.jsonl").read_text().splitlines()]


def test_slime_rows_match_sample_and_train_the_sampled_tokens(exported, tiny_runs, tiny_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    episodes = {ep.key: ep for ep in load(tiny_runs)}
    decoded, from_messages = rows(exported["decoded"]), rows(exported["messages"])
    assert len(decoded) == len(from_messages) == 3  # a merged episode, a compacted one's 2 branches
    for r, m in zip(decoded, from_messages, strict=True):
        assert set(r) <= set(SAMPLE) | OTHER_FIELDS and r["status"] in STATUSES
        for name, types in SAMPLE.items():
            assert isinstance(r[name], types), (name, r[name])
        assert type(r["group_index"]) is int and r["group_index"] == 0  # one task, one group
        n = r["response_length"]
        assert len(r["loss_mask"]) == len(r["rollout_log_probs"]) == n < len(r["tokens"])
        turns = {t.sequence: t for t in episodes[r["metadata"]["episode"]].turns}
        calls = r["metadata"]["calls"]
        trained = [t for t, k in zip(r["tokens"][-n:], r["loss_mask"], strict=True) if k]
        assert trained == [i for c in calls for i in turns[c].completion_ids]
        assert r["response"] == tokenizer.decode(r["tokens"][-n:]) != ""
        assert m["response"] and "<|end|>" not in m["response"]  # no tokenizer: the messages
        assert '"command": "' in m["response"]
    assert [r["rollout_id"] for r in decoded] == [0, 1, 1]  # the compacted episode's branches
    assert [r["reward"] for r in decoded] == [1.0, 0.0, 0.0]
    saved = torch.load(exported["decoded"] / "rollout_data" / "0.pt", weights_only=False)
    assert saved == {"rollout_id": 0, "samples": decoded}


@pytest.mark.skipif(not os.environ.get("POMONA_SLIME_SRC"),
                    reason="no slime checkout given (POMONA_SLIME_SRC=DIR): slime is not on any "
                           "registry this machine reaches")  # fmt: skip
def test_slimes_own_loader_reads_the_rollout(exported):
    sys.path.insert(0, os.environ["POMONA_SLIME_SRC"])
    try:
        from slime.observability.rollout_data_utils import load_debug_rollout_data
        from slime.utils.types import Sample
    finally:
        sys.path.pop(0)
    path = str(exported["decoded"] / "rollout_data" / "{rollout_id}.pt")
    loaded = load_debug_rollout_data(path, rollout_id=0)
    expected = rows(exported["decoded"])
    assert [type(s) for s in loaded] == [Sample] * len(expected)
    for s, r in zip(loaded, expected, strict=True):
        assert s.status == Sample.Status.COMPLETED and s.group_index == 0
        assert (s.tokens, s.response_length, s.loss_mask) == (
            r["tokens"],
            r["response_length"],
            r["loss_mask"],
        )
        assert s.response == r["response"] and s.effective_response_length == sum(r["loss_mask"])
        assert s.to_dict()["status"] == "completed"
