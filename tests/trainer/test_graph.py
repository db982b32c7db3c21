"""The trajectory graph: calls chained by token prefix, a rewritten history as a new branch with
its lineage, and conversations rebuilt from what the upstream returned."""

from __future__ import annotations

import pytest
from conftest import sdk_episode, tool_conversation

from pomona.trainer import graph
from pomona.trainer.episodes import load
from pomona.trainer.samples import BRANCHED, samples

pytestmark = pytest.mark.timeout(900)


def test_a_compacted_history_is_a_new_branch_with_its_lineage(tiny_model, tmp_path):
    # a harness that compacts: two calls, then it drops the history and starts over from a
    # shorter conversation, two calls again
    first, second = tool_conversation("ls")[:2], tool_conversation("pwd")[:2]
    sdk_episode(tiny_model, tmp_path, [first, second])
    (ep,) = load(tmp_path)
    assert len(ep.turns) == 4 and all(t.has_tokens for t in ep.turns)
    g = graph.build(ep)
    calls = [t.sequence for t in ep.turns]
    assert [g.node(c).parent for c in calls] == [None, calls[0], None, calls[2]]
    a, b = g.branches
    assert (a.calls, b.calls, a.lineage, b.context) == (calls[:2], calls[2:], None, [])
    # the rewrite shares the system prompt and the start of the user turn with call 1, the
    # latest call it agrees with that far
    assert (b.lineage.kind, b.lineage.call, b.lineage.parent_branch) == ("rewrite", calls[1], 0)
    shared = graph.common_prefix(g.node(calls[1]).sequence, g.node(calls[2]).prompt)
    assert b.lineage.shared == shared and 0 < shared < len(g.node(calls[2]).prompt)

    one, two = samples(ep)
    assert (one.rule, two.rule, one.turns, two.turns) == (BRANCHED, BRANCHED, calls[:2], calls[2:])
    for s, (c0, c1) in ((one, calls[:2]), (two, calls[2:])):
        n0, n1 = ep.turns[calls.index(c0)], ep.turns[calls.index(c1)]
        assert s.input_ids == n1.prompt_ids + n1.completion_ids
        # only the model's own tokens are trained: both completions, nothing of the tool output
        assert s.trained() == n0.completion_ids + n1.completion_ids
        start = len(n1.prompt_ids)
        assert s.loss_mask[start:] == [1] * len(n1.completion_ids)
        between = s.loss_mask[len(n0.prompt_ids) + len(n0.completion_ids) : start]
        assert between and set(between) == {0}  # the tool result and template glue
        assert [lp for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m] == [
            *n0.logprobs, *n1.logprobs]  # fmt: skip
    assert g.masked == []

    convs = g.conversations()
    assert [c.calls for c in convs] == [calls[:2], calls[2:]]
    assert convs[1].messages[:2] == second and convs[1].messages[2] == ep.turns[2].reply


def test_arguments_become_objects_and_text_that_is_not_json_stays():
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"a": 1}'}}
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    assert graph.with_object_arguments(message)["tool_calls"][0]["function"]["arguments"] == {
        "a": 1
    }
    assert graph.arguments_object("not json") == "not json"
    assert graph.arguments_object("[1, 2]") == "[1, 2]"  # a template wants an object
