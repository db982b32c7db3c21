"""A real training run on the CPU: TRL's SFTTrainer on an exported set (the loss falls), and one
policy-gradient step on token-level RL samples (the rewarded completion gains on the other)."""

from __future__ import annotations

import itertools

import pytest
from conftest import two_turn_episode
from transformers import AutoModelForCausalLM

from pomona.trainer.episodes import Filters, load
from pomona.trainer.export import export, rl_samples
from pomona.trainer.train import load_sft_dataset, policy_gradient_step, sft

# the session fixtures (harness recordings, a tiny model's SFT run) are set up inside the first
# test's time; on a busy shared 2-core machine that can exceed the suite-wide 300 s
pytestmark = pytest.mark.timeout(900)


def test_sft_on_an_exported_set_lowers_the_loss(recorded, tiny_model, tmp_path):
    # the chat harnesses' conversations (Claude Code's system prompt alone is ~15k tiny tokens)
    chat = Filters(harness=["pi", "mini-swe-agent"])
    data = export("sft", recorded, "trl", tmp_path / "sft", filters=chat).path
    assert len(load_sft_dataset(data)) == 2
    base = tiny_model.parent / "tiny-base"  # the untrained weights
    result = sft(data, base, tmp_path / "out", steps=3, batch_size=2, max_length=None)
    assert result.steps == 3 and len(result.losses) == 3
    # three steps on the two conversations (measured: 6.10, 5.75, 5.50); each step's is lower
    assert all(b < a for a, b in itertools.pairwise(result.losses)), result.losses
    assert result.losses[-1] < result.losses[0] * 0.95, result.losses
    assert AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")) is not None
    with pytest.raises(FileNotFoundError, match="no exported SFT set"):
        load_sft_dataset(tmp_path)


def test_a_policy_gradient_step_favours_the_rewarded_completion(tiny_model, tmp_path):
    runs = tmp_path / "runs"
    # two attempts at one task that answered differently (the tiny model runs what it is asked)
    two_turn_episode(tiny_model, runs, command="ls", reward=1.0)
    two_turn_episode(tiny_model, runs, command="pwd", reward=0.0)
    items = rl_samples(load(runs))  # recorded tokens: no tokenizer needed
    assert {round(i.advantage, 4) for i in items} == {0.7071, -0.7071}  # [1, 0] normalised
    batch = [(i.sample.input_ids, i.sample.loss_mask, i.advantage) for i in items]
    rewarded = next(k for k, i in enumerate(items) if i.advantage > 0)

    def step(advantages: list[float]) -> tuple[list[float], list[float]]:
        model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
        signed = [(ids, mask, a) for (ids, mask, _), a in zip(batch, advantages, strict=True)]
        return policy_gradient_step(model, signed, lr=0.05)

    def gap(lps: list[float]) -> float:  # rewarded minus unrewarded mean logprob
        return 2 * lps[rewarded] - sum(lps)

    # A small REINFORCE step ascends sum_s A_s * logp_s, here (A = +-0.71) the gap between the
    # two completions. It promises neither that the rewarded one rises nor that the other falls:
    # the two share the tool-call markup, which the rewarded one's larger gradient lifts in both
    # (measured: the unrewarded mean logprob rose -0.16055 -> -0.16026, the gap 0.053 -> 0.080).
    before, after = step([a for _, _, a in batch])
    assert gap(after) > gap(before), (before, after)
    # the direction is the advantages': reversed, the same step narrows the gap
    _, reversed_after = step([-a for _, _, a in batch])
    assert gap(reversed_after) < gap(before), (before, reversed_after)
    # the recorded logprobs are the model's own: the trainer's first forward pass agrees
    first = items[0].sample
    recorded = [lp for lp, m in zip(first.logprobs, first.loss_mask, strict=True) if m]
    assert before[0] == pytest.approx(sum(recorded) / len(recorded), abs=1e-3)
