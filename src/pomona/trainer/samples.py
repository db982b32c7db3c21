"""Token-level training samples: one per branch of the episode's trajectory graph (graph.py).

A sample is the last call's prompt + completion tokens of its branch, as the engine saw and
sampled them (`tokens="recorded"`) or, for calls without token ids, rendered with the tokenizer
given (`tokens="rendered"`, no logprobs). `loss_mask` is 1 on the completion tokens of the calls
the branch trains and 0 everywhere else (system prompt, tool output, user turns, template glue,
the calls a forked branch holds as context, and anything graph.py masked as ambiguous).
`logprobs` are the engine's, per token (0.0 where masked); `advantages` per token once an export
or a credit method sets them. An episode that is one branch is `merged`; one whose history was
rewritten (or that forked) is `branched`, and each branch gets the episode reward discounted by
the calls after its last one (`discount**k`; 1.0 by default).

Drift: with a tokenizer, each recorded call is also re-rendered the way trainers that rebuild
samples from messages do (alone, and as part of the whole conversation). Where that does not
reproduce the call's tokens, the sample is flagged: a re-rendering trainer would train on a
prefix the model never saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pomona.trainer import graph as graphs
from pomona.trainer.episodes import Episode
from pomona.trainer.graph import Graph, Lineage, NoTokens, common_prefix, render

MERGED, BRANCHED = "merged", "branched"


@dataclass
class TokenSample:
    episode: str
    task: str
    branch: int
    rule: str  # merged | branched
    tokens: str  # recorded | rendered
    turns: list[int]  # the calls whose completions are trained here, in order
    context: list[int]  # earlier calls in the prefix, trained in another branch
    input_ids: list[int]
    loss_mask: list[int]  # 1: sampled by the policy in one of `turns` (trainable)
    logprobs: list[float] | None  # per token, 0.0 where masked; None when unknown
    reward: float | None
    messages: list[dict[str, Any]]  # the conversation the sample holds (prompt + replies)
    tools: list[dict[str, Any]]
    lineage: Lineage | None = None  # where the branch comes from (None: the first branch)
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (call, start, end)
    sampling: dict[int, dict[str, Any] | None] = field(default_factory=dict)  # per call
    pinned: dict[int, bool | None] = field(default_factory=dict)  # per call: under its pin?
    pinned_reason: dict[int, str | None] = field(default_factory=dict)  # per call: why (not)
    advantages: list[float] | None = None  # per token; set by an export or credit method
    drift: bool | None = None  # None: nothing recorded to compare with, or no tokenizer
    drift_detail: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_length(self) -> int:
        """Tokens before the first trainable one."""
        return next((i for i, m in enumerate(self.loss_mask) if m), len(self.loss_mask))

    @property
    def response_length(self) -> int:
        return len(self.input_ids) - self.prompt_length

    def trained(self) -> list[int]:
        """The token ids the sample trains."""
        return [t for t, m in zip(self.input_ids, self.loss_mask, strict=True) if m]

    def set_advantage(self, advantage: float | dict[int, float] | None) -> None:
        """Per-token advantages: one value on every trainable token, or one per call (branching
        credit); 0.0 on masked tokens."""
        if advantage is None:
            self.advantages = None
            return
        out = [0.0] * len(self.input_ids)
        for call, start, end in self.spans:
            a = advantage.get(call) if isinstance(advantage, dict) else advantage
            for i in range(start, end):
                out[i] = float(a or 0.0) * self.loss_mask[i]
        self.advantages = out


def drift(episode: Episode, tokenizer: Any) -> dict[int, str]:
    """Calls whose recorded tokens a re-rendering trainer would not reproduce, with where.

    Two checks per recorded call: its prompt rendered alone (the template or tokenizer differs
    from the upstream's), and its prompt + completion as a prefix of its whole conversation
    rendered at once (the template rewrites earlier turns, as one that drops old reasoning does)."""
    found: dict[int, str] = {}
    g = graphs.build(episode)
    whole: dict[int, list[int]] = {}
    for conv in g.conversations():
        ids = render(tokenizer, conv.messages, conv.tools, False)
        whole.update({c: ids for c in conv.calls if c not in whole})
    for turn in episode.turns:
        if turn.tokens is None:
            continue
        prompt_ids, completion_ids = turn.tokens
        alone = render(tokenizer, turn.messages, turn.tools, True)
        if alone != prompt_ids:
            i = common_prefix(alone, prompt_ids)
            found[turn.sequence] = (
                f"call {turn.sequence}: its messages re-rendered differ from the prompt the model "
                f"saw at token {i} of {len(prompt_ids)}"
            )
            continue
        seen = [*prompt_ids, *completion_ids]
        rendered = whole.get(turn.sequence, [])
        if rendered[: len(seen)] != seen:
            i = common_prefix(rendered, seen)
            found[turn.sequence] = (
                f"call {turn.sequence}: re-rendering the whole conversation changes what the "
                f"model saw at token {i} of {len(seen)}"
            )
    return found


def _meta(episode: Episode) -> dict[str, Any]:
    return {
        "run": episode.row.get("run"),
        "harness": episode.row.get("harness"),
        "model": episode.row.get("model"),
        "benchmark": episode.row.get("benchmark"),
        "resolved": episode.resolved,
        "failure_kind": episode.row.get("failure_kind"),
    }


def _sample(g: Graph, branch: graphs.Branch, reward: float | None) -> TokenSample:
    ep = g.episode
    last = g.node(branch.calls[-1])
    ids = last.sequence
    if ids is None:
        raise NoTokens(
            f"call {last.call} has no token ids from the upstream: give a tokenizer to "
            "render them (e.g. --tokenizer MODEL_DIR)"
        )
    mask = [0] * len(ids)
    logprobs: list[float] | None = [0.0] * len(ids)
    spans = []
    for call in branch.calls:
        node = g.node(call)
        assert node.prompt is not None and node.completion is not None  # chained: has tokens
        start, end = len(node.prompt), len(node.prompt) + len(node.completion)
        spans.append((call, start, end))
        if node.trainable:
            mask[start:end] = [1] * (end - start)
        if node.logprobs is None or logprobs is None:
            logprobs = None
        else:
            logprobs[start:end] = node.logprobs
    kinds = {g.node(c).tokens for c in branch.calls}
    conv = next((c for c in g.conversations() if c.calls[-1] == last.call), None)
    messages = conv.messages if conv else [*last.turn.messages, last.turn.reply]
    turns = {c: g.node(c).turn for c in branch.calls}
    return TokenSample(
        ep.key, ep.task, branch.id, MERGED if len(g.branches) == 1 else BRANCHED,
        graphs.RECORDED if kinds == {graphs.RECORDED} else graphs.RENDERED,
        list(branch.calls), list(branch.context), ids, mask, logprobs, reward, messages,
        last.turn.tools, branch.lineage, spans, {c: t.sampling for c, t in turns.items()},
        {c: t.pinned for c, t in turns.items()}, {c: t.pinned_reason for c, t in turns.items()},
        metadata=_meta(ep),
    )  # fmt: skip


def samples(
    episode: Episode, tokenizer: Any = None, *, discount: float = 1.0, graph: Graph | None = None
) -> list[TokenSample]:
    """The episode's training samples, one per branch of its graph (built here unless given)."""
    if not episode.turns:
        return []
    g = graph or graphs.build(episode, tokenizer)
    drifted = drift(episode, tokenizer) if tokenizer is not None else {}
    any_recorded = any(n.tokens == graphs.RECORDED for n in g.nodes.values())
    order = [n.call for n in g.nodes.values()]
    out = []
    for branch in g.branches:
        after = len(order) - 1 - order.index(branch.calls[-1])
        reward = None if episode.reward is None else episode.reward * discount**after
        s = _sample(g, branch, reward)
        if tokenizer is not None and any_recorded:
            details = [drifted[c] for c in branch.calls if c in drifted]
            s.drift, s.drift_detail = bool(details), "; ".join(details) or None
        out.append(s)
    return out
