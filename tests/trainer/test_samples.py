"""Samples from recorded calls: merged when each prompt extends the previous prompt+completion,
branched where the history was rewritten; drift flagged when re-rendering would change what the model saw."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import TASK, two_turn_episode
from transformers import AutoTokenizer

import pomona.gym
from pomona import trajectories
from pomona.proxy import ModelRoute, ProxyConfig, ProxyServer
from pomona.trainer import graph
from pomona.trainer.episodes import Filters, load
from pomona.trainer.samples import BRANCHED, MERGED, samples

# the session fixtures (harness recordings, a tiny model's SFT run) are set up inside the first
# test's time; on a busy shared 2-core machine that can exceed the suite-wide 300 s
pytestmark = pytest.mark.timeout(900)


def by_harness(runs: Path) -> dict:
    return {ep.row["harness"]: ep for ep in load(runs)}


def test_recorded_tokens_merge_or_split_as_the_proxy_judged(recorded, tiny_model):
    eps = by_harness(recorded)
    calls = trajectories.read(recorded, "calls").to_pylist()
    verdicts = {h: [c["token_faithful"] for c in calls
                    if c["episode"] == ep.key and not c["side"]] for h, ep in eps.items()}  # fmt: skip

    # mini-swe-agent replays the model's text verbatim: one merged sample of recorded tokens
    mini = eps["mini-swe-agent"]
    assert verdicts["mini-swe-agent"] == [True] * len(mini.turns) and len(mini.turns) >= 2
    (s,) = samples(mini)
    assert (s.rule, s.tokens, s.reward, s.turns) == (
        MERGED,
        "recorded",
        1.0,
        [t.sequence for t in mini.turns],
    )
    last = mini.turns[-1]
    assert s.input_ids == last.prompt_ids + last.completion_ids
    trained = [t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m]
    assert trained == [t for turn in mini.turns for t in turn.completion_ids]
    assert [lp for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m] == [
        lp for turn in mini.turns for lp in turn.logprobs]  # fmt: skip
    assert s.drift is None  # no tokenizer given: nothing to compare

    # pi sends tool-call arguments back re-serialised: the proxy saw the prefix break, and each
    # call is a branch of its own whose lineage says where the history was rewritten; the
    # reward is discounted back from the last call
    pi = eps["pi"]
    assert verdicts["pi"][0] is True and False in verdicts["pi"]
    per_call = samples(pi, discount=0.5)
    n = len(pi.turns)
    assert [x.rule for x in per_call] == [BRANCHED] * n
    assert [x.reward for x in per_call] == [0.5 ** (n - 1 - i) for i in range(n)]
    for x, turn in zip(per_call, pi.turns, strict=True):
        assert x.input_ids == turn.prompt_ids + turn.completion_ids
        assert sum(x.loss_mask) == len(turn.completion_ids) == x.response_length
    first, second = pi.turns[0], pi.turns[1]
    lineage = per_call[1].lineage
    assert (lineage.kind, lineage.call, lineage.parent_branch) == ("rewrite", first.sequence, 0)
    assert len(first.prompt_ids) < lineage.shared < len(first.prompt_ids + first.completion_ids)
    # the conversation is one all the same: the re-serialised reply says what the model said,
    # and the conversational exports take the model's own reply, not pi's copy of it
    g = graph.build(pi)
    assert g.node(second.sequence).follows == first.sequence
    assert g.node(second.sequence).resent == "reserialised"
    (conv,) = g.conversations()
    replies = [m for m in conv.messages if m["role"] == "assistant"]
    resent = second.messages[len(first.messages)]
    own = first.reply["tool_calls"][0]["function"]["arguments"]
    assert replies[0]["tool_calls"][0]["function"]["arguments"] == own
    assert resent["tool_calls"][0]["function"]["arguments"] != own  # pi's compact copy


def test_calls_without_token_ids_are_rendered_by_the_tokenizer(
    recorded, tiny_model, drop_think_model
):
    claude = by_harness(recorded)["claude-code"]
    assert claude.turns[0].dialect == "anthropic" and not claude.turns[0].has_tokens
    with pytest.raises(graph.NoTokens, match="no token ids"):
        samples(claude)
    # a template that round-trips: the rendered turns extend each other, one merged sample
    (merged,) = samples(claude, AutoTokenizer.from_pretrained(str(tiny_model)))
    assert (merged.rule, merged.tokens, merged.logprobs, merged.drift) == (
        MERGED,
        "rendered",
        None,
        None,
    )
    assert sum(merged.loss_mask) > 0
    # the same episode under a template that drops earlier reasoning blocks: one per call
    split = samples(claude, AutoTokenizer.from_pretrained(str(drop_think_model)))
    assert [x.rule for x in split] == [BRANCHED] * len(claude.turns)


def test_drift_is_flagged_on_a_template_that_does_not_round_trip(
    tiny_model, drop_think_model, tmp_path
):
    two_turn_episode(tiny_model, tmp_path / "round-trip")
    (ep,) = load(tmp_path / "round-trip")
    assert len(ep.turns) == 2 and all(t.has_tokens for t in ep.turns)
    (s,) = samples(ep, AutoTokenizer.from_pretrained(str(tiny_model)))
    assert (s.rule, s.tokens, s.drift) == (MERGED, "recorded", False)

    two_turn_episode(drop_think_model, tmp_path / "drop-think")
    (ep,) = load(tmp_path / "drop-think")
    tokenizer = AutoTokenizer.from_pretrained(str(drop_think_model))
    split = samples(ep, tokenizer)
    assert [x.rule for x in split] == [BRANCHED, BRANCHED]
    # the first call's prompt ended with the empty think block; re-rendering the conversation drops
    # it, so a re-rendering trainer would be off exactly there
    first = ep.turns[0]
    think = tokenizer.convert_tokens_to_ids("<think>")
    at = len(first.prompt_ids) - 2
    assert first.prompt_ids[at] == think
    assert split[0].drift is True and f"at token {at} of" in split[0].drift_detail


def test_filters_and_unreadable_input(recorded, tmp_path):
    assert {e.row["harness"] for e in load(recorded, Filters(harness=["pi"]))} == {"pi"}
    assert load(recorded, Filters(min_reward=2.0)) == []
    assert len(load(recorded, Filters(resolved=True, model=["tokens"]))) == 2
    with pytest.raises(FileNotFoundError, match="no trajectory directory"):
        load(tmp_path / "missing")
    # an episode whose reward is missing (an infra failure) is not training data
    runs = tmp_path / "runs"
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        ep = proxy.open_episode(model="scripted", metadata={"task": "x"})
        proxy.close_episode(ep["key"], failure_kind="sandbox", failure_message="lost")
    assert load(runs) == [] and len(load(runs, Filters(include_failed=True))) == 1
    assert json.loads(trajectories.read(runs, "episodes").to_pylist()[0]["metadata"]) == {}
    # nor is a judge's conversation the policy's, scored or not
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        judge = proxy.open_episode(model="scripted", metadata={"task": "x", "role": "judge"})
        proxy.close_episode(judge["key"], reward=1.0, resolved=True)
    assert load(runs) == [] and len(load(runs, Filters(include_failed=True))) == 1
    assert len(load(runs, Filters(include_failed=True, include_helpers=True))) == 2


@pytest.fixture(scope="module")
def translated(tiny_model: Path, gym_state: str, session_dir: Path) -> Path:
    """pi in its Anthropic and Responses dialects, answered by the tiny model through a
    `transformers/` route: every call translated by LiteLLM to the model's chat wire."""
    runs = session_dir / "runs-translated"
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        proxy.config.models.append(ModelRoute.from_entry({"model_name": "tiny", "litellm_params": {
            "model": f"transformers/{tiny_model}", "temperature": 0, "max_tokens": 32}}))  # fmt: skip
        for dialect in ("anthropic", "responses"):
            (record,) = asyncio.run(pomona.gym.rollout([TASK], "pi", "tiny", dialect=dialect,
                                                       proxy=proxy, state_dir=gym_state,
                                                       timeout=300, progress=False))  # fmt: skip
            assert record.failure_kind == "none", record.failure_message
    return runs


def test_anthropic_and_responses_callers_get_the_upstreams_token_ids(translated, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    calls = [c for c in trajectories.read(translated, "calls").to_pylist() if not c["side"]]
    assert {c["dialect"] for c in calls} == {"anthropic", "responses"}
    assert {(c["upstream"], c["upstream_dialect"], c["status"]) for c in calls} == {
        ("litellm", "chat", "ok")
    }
    # pi asks for its own default reply length; the route's max_tokens caps it
    assert all(len(c["completion_token_ids"]) <= 32 for c in calls)
    episodes = load(translated)
    assert len(episodes) == 2
    for ep in episodes:
        rows = sorted((c for c in calls if c["episode"] == ep.key), key=lambda c: c["sequence"])
        # the turns are the conversation the model saw (the chat request LiteLLM sent), so the
        # model's own template reproduces the prompt ids it answered: no drift
        assert [t.dialect for t in ep.turns] == ["chat"] * len(rows)
        assert [t.prompt_ids for t in ep.turns] == [c["prompt_token_ids"] for c in rows]
        for s in samples(ep, tokenizer):
            assert (s.tokens, s.drift) == ("recorded", False), s.drift_detail
            by_turn = {c["sequence"]: c["completion_logprobs"] for c in rows}
            trained = [lp for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m]
            assert trained == [lp for t in s.turns for lp in by_turn[t]] and trained
