"""verl's agent loop playing a new Pomona episode (PomonaAgentLoop), run through verl 0.9's own
AgentLoopWorker in verl's own venv (tests/trainer/verl_venv.sh): pi plays a built-in task in a
local sandbox, each of its model calls generated through the server manager the worker holds.
That server manager is a stand-in generating with the suite's tiny model (verl_play.py says why:
no vLLM or SGLang server can run here). Asserted: verl trains exactly what the model generated,
with its logprobs, the tool output between its calls masked out, and the grader's reward. The
model is the tiny one taught under pi's own tools (`pi_tiny_model`), so that greedy it calls
bash, reads the output and ends."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pomona.trainer import verl_reward
from pomona.trainer.episodes import Filters, load

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
VERL = REPO / ".cache" / "venvs" / "verl" / "bin" / "python"
PLAY = Path(__file__).with_name("verl_play.py")
# what the tiny model was taught: call bash with the command asked for, then say ok
TASK = {"id": "verl/run-ls", "instruction": "Please run ls."}
SCORER = {"check": "ls", "expected": ""}  # the workspace is empty


def test_verl_agent_loop_plays_an_episode_and_trains_what_the_model_sampled(
    pi_tiny_model, gym_state, tmp_path
):
    if not VERL.exists():
        pytest.skip(f"verl's venv is missing ({VERL}): ./dev setup builds it")
    runs, data = tmp_path / "runs", tmp_path / "train.parquet"
    runs.mkdir()
    pq.write_table(pa.Table.from_pylist([{
        "data_source": "pomona", "prompt": [{"role": "user", "content": TASK["instruction"]}],
        "ability": "agent", "extra_info": {"index": 0, "task": TASK["id"]},
    }]), data)  # fmt: skip
    config = {"model": str(pi_tiny_model), "task": TASK, "scorer": SCORER, "state_dir": gym_state,
              "runs": str(runs), "data": str(data), "reward": verl_reward.__file__}  # fmt: skip
    proc = subprocess.run([str(VERL), str(PLAY), json.dumps(config)], capture_output=True,
                          text=True, timeout=800, env={**os.environ, "OMP_NUM_THREADS": "1",
                          "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["failure"] is None and got["generated"], got
    # verl's sampling params reached the engine: the rollout config's temperature, logprobs asked
    assert {(s["temperature"], s["logprobs"]) for s in got["sampling"]} == {(0.0, True)}  # greedy
    (episode,) = [e for e in load(runs, Filters(include_failed=True)) if e.key == got["episode"]]
    assert episode.row["harness"] == "pi" and episode.task == TASK["id"]
    # every generation a recorded call, token for token (the proxy recorded the engine's ids)
    assert [(t.prompt_ids, t.completion_ids) for t in episode.turns] == [
        (g["prompt_ids"], g["token_ids"]) for g in got["generated"]
    ]

    # greedy, the model taught under pi's tools: a bash call, its output, then "ok": two calls in
    # one conversation (one branch), pi's history sent back verbatim
    calls = got["generated"]
    assert (len(calls), got["branches"]) == (2, 1)
    assert got["prompt_ids"] == calls[0]["prompt_ids"]
    mask = got["response_mask"]
    sampled = [t for t, m in zip(got["response_ids"], mask, strict=True) if m]
    assert sampled == [t for g in calls for t in g["token_ids"]]
    # the second prompt is the first, its completion, then the tool output: masked out
    second = calls[1]["prompt_ids"]
    assert (got["prompt_ids"] + got["response_ids"])[: len(second)] == second
    glue = len(second) - len(calls[0]["prompt_ids"]) - len(calls[0]["token_ids"])
    expected = [1] * len(calls[0]["token_ids"]) + [0] * glue + [1] * len(calls[1]["token_ids"])
    assert glue > 0 and mask == expected
    kept = [lp for lp, m in zip(got["rollout_log_probs"], mask, strict=True) if m]
    assert kept == pytest.approx([lp for g in calls for lp in g["log_probs"]], abs=1e-5)
    assert got["rm_scores"][-1] == episode.reward and not any(got["rm_scores"][:-1])
    assert got["num_turns"] == 5  # user, assistant, tool, assistant (+ pi's system prompt)
