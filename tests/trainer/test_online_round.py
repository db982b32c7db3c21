"""One full round of the online loop on the real model (SmolLM2-135M-Instruct): episodes of pi
in local sandboxes through the recording proxy, sampled by the served policy; one step of TRL's
GRPOTrainer on their recorded tokens; the new weights served as the next policy version without
a restart; the next call answered by that version.

The base model resolves no task, so a group of its episodes would have no advantage and TRL's
step no gradient. The task here is therefore graded by `Alternating`: the attempts are scored
1, 0, 1, ... in the order they are graded, which gives the group a reward spread whatever the
model does. Everything else is the real thing: the harness, the sandboxes, the proxy, the
recording, the model, TRL's trainer and the weight swap.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import openai
import pytest
from conftest import sent_ids

from pomona import trajectories
from pomona.benchmarks.task import Score, Task
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.trainer.episodes import Filters, load, model_view
from pomona.trainer.online import Policy, rl
from pomona.trainer.trl_rollout import episode_tokens, versions

# two pi episodes and a GRPO step on a 135M model, on a shared 2-core CPU
pytestmark = pytest.mark.timeout(1800)


class Alternating:
    """A grader that scores a task's attempts 1, 0, 1, ... in grading order (see the module doc)."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._lock = threading.Lock()

    def collect(self, task: Task, sandbox: Any) -> dict[str, Any]:
        with self._lock:
            return {"order": next(self._order)}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        first = artifacts["order"] % 2 == 0
        return Score(reward=1.0 if first else 0.0, resolved=first, details=artifacts)


def _version(row: dict[str, Any]) -> Any:
    _, _, response = model_view(row)
    return response.get("policy_version")


def test_one_round_on_the_real_model(gym_state, tmp_path):
    import torch

    from pomona.proxy import local_model

    try:
        local_model.builtin_path("smollm2")
    except local_model.ModelLoadError as e:
        pytest.skip(str(e))
    task = Task(id="online/hello", instruction="Create a file hello.txt containing hello.",
                scorer=Alternating(), benchmark="online")  # fmt: skip
    runs = tmp_path / "runs"
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        policy = Policy("smollm2", proxy, max_new_tokens=24, trainable_layers=1)
        try:
            top, bottom = policy.train_model.model.layers[-1], policy.train_model.model.layers[0]
            before = {n: p.detach().clone() for n, p in top.named_parameters()}
            frozen = {n: p.detach().clone() for n, p in bottom.named_parameters()}
            result = rl(policy, [task], "pi", trajectories=runs, rounds=1, group=2,
                        learning_rate=1e-4, state_dir=gym_state, timeout=900,
                        output_dir=tmp_path / "rl")  # fmt: skip
            round_calls = trajectories.read(runs, "calls").to_pylist()

            # the weights TRL stepped are the ones served now, as version 1
            assert result.steps == 1 and result.versions == [1] and policy.version == 1
            assert any(not torch.equal(before[n], p) for n, p in top.named_parameters())
            assert all(torch.equal(frozen[n], p) for n, p in bottom.named_parameters())
            served = policy.served.model.state_dict()
            assert all(
                torch.equal(served[k], v) for k, v in policy.train_model.state_dict().items()
            )

            # the next call through the proxy is served by the new version, and recorded so
            ep = proxy.open_episode(model="learner-greedy")
            client = openai.OpenAI(base_url=ep["base_url"], api_key="x", max_retries=0, timeout=900)
            reply = client.chat.completions.create(
                model="learner-greedy", messages=[{"role": "user", "content": "Say hi."}],
                max_tokens=4)  # fmt: skip
            proxy.close_episode(ep["key"], reward=0.0)
        finally:
            policy.close()
    assert reply.model_extra["policy_version"] == 1
    (after,) = [
        r for r in trajectories.read(runs, "calls").to_pylist() if r["episode"] == ep["key"]
    ]
    assert after["status"] == "ok" and _version(after) == 1

    # the round: two pi episodes, every call sampled by version 0, its prompt ids the
    # tokenizer's encoding of what the proxy sent, one logprob per sampled token
    tokenizer = policy.served.tokenizer
    episodes = [e for e in load(runs, Filters(include_failed=True)) if e.task == task.id]
    assert len(episodes) == 2 and sorted(e.reward for e in episodes) == [0.0, 1.0]
    keys = {e.key for e in episodes}
    calls = [r for r in round_calls if r["episode"] in keys and not r["side"]]
    assert calls and all(r["status"] == "ok" for r in calls)
    for row in calls:
        assert _version(row) == 0
        assert row["prompt_token_ids"] == sent_ids(tokenizer, row)
        assert 0 < len(row["completion_token_ids"]) == len(row["completion_logprobs"]) <= 24
    assert after["prompt_token_ids"] == sent_ids(tokenizer, after)
    assert "<tools>" in tokenizer.decode(calls[0]["prompt_token_ids"])  # pi's tools, written in

    # what TRL trained: the recorded sampled tokens of the round, nothing masked or stale
    stats = result.stats
    assert [stats.get(k, 0) for k in ("no_tokens", "masked_attempts", "stale_tokens")] == [0, 0, 0]
    first_calls = [min((r for r in calls if r["episode"] == k), key=lambda r: r["sequence"])
                   for k in keys]  # fmt: skip
    sampled = sum(len(r["completion_token_ids"]) for r in calls)
    assert sum(len(r["completion_token_ids"]) for r in first_calls) <= stats["trained_tokens"]
    assert stats["trained_tokens"] <= sampled
    assert result.log and result.log[0]["frac_reward_zero_std"] == 0  # the group had an advantage

    # replayed to a trainer at version 1, the same episodes are stale: every token masked
    of = versions(runs, keys)
    assert set(of.values()) == {0}
    for episode in episodes:
        fresh, stale = episode_tokens(episode, of, 0), episode_tokens(episode, of, 1)
        assert fresh is not None and stale is not None and sum(fresh.env_mask) > 0
        assert sum(stale.env_mask) == 0 and stale.stale_tokens == sum(fresh.env_mask)
