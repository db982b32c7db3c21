"""The trajectory graph: an episode's policy calls as the engine saw and sampled them, chained
where one call's tokens continue another's, and branched where the history was rewritten.

Every export reads an episode through this graph (samples.py for token data, export.py for
conversations), so what one format trains is what the others train.

Nodes. One per policy turn (episodes.Turn): the prompt token ids the engine saw, the completion
ids it sampled with their logprobs, the sampling parameters the call was made with, and the
conversation in chat-template shape with the reply *as the upstream returned it* (never the
harness's re-sent copy of it).

Token edges (NeMo Gym's strict prefix chaining). A call's `parent` is the latest earlier call
whose whole sequence (prompt + completion) is a prefix of this call's prompt; the tokens between
are what the harness added (tool output, user turns, template glue). A call with no parent
starts a new branch; its lineage names the earlier call it shares the longest token prefix with
and how many tokens: a compaction or history rewrite (the harness edited what the model had
seen), or a sub-agent (a new conversation that shares little or nothing).

Branches. A chain of parents is one branch: one training sample, each call's completion
trainable (mask 1) where it sits, everything else masked (0). When two calls continue the same
call (the tree forks), the first continues its branch; the other starts a branch whose prefix
holds the shared calls as context, masked there (each completion is trained in exactly one
branch).

Conversation edges (for conversational exports). A call `follows` the latest earlier call whose
messages are a prefix of its own and whose reply the harness sent back as the next assistant
message, verbatim or re-serialised (same text, same tool calls with the same arguments as
objects). Along such a chain a conversation is rebuilt with each assistant turn taken from the
reply the upstream returned. A re-sent reply that says something else (edited, summarised)
breaks the chain: a new conversation.

Ambiguity is never guessed: a completion whose boundary in the rendered text is unclear, token
ids without their prompt, logprobs that do not line up with the tokens: such tokens are masked,
and each case is listed in `Graph.masked` with the call and the reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pomona.errors import PomonaError
from pomona.trainer.episodes import Episode, Message, Turn

RECORDED, RENDERED = "recorded", "rendered"


class TrainingDataError(PomonaError, ValueError):
    """Recorded episodes cannot be made into the data asked for, as given."""


class NoTokens(TrainingDataError):
    """A call has no token ids from the upstream and no tokenizer was given to render them."""


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items `a` and `b` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def render(tokenizer: Any, messages: list[dict], tools: list[dict], prompt: bool) -> list[int]:
    """Token ids of a conversation through the tokenizer's chat template."""
    out = tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=prompt, return_dict=True
    )
    return list(out["input_ids"])


@dataclass
class Masked:
    """Tokens left out of training because what they are could not be told for certain."""

    call: int
    tokens: int
    reason: str


@dataclass
class Node:
    """One policy call in the graph."""

    turn: Turn
    prompt: list[int] | None  # None: no token ids and no tokenizer
    completion: list[int] | None
    logprobs: list[float] | None  # per completion token; None when unknown
    tokens: str | None  # recorded | rendered | None
    trainable: bool = True  # False: its completion's boundary is uncertain (see Graph.masked)
    parent: int | None = None  # the call whose whole sequence this prompt extends
    follows: int | None = None  # the call whose reply this call's messages carry on from
    resent: str | None = None  # how that reply came back: verbatim | reserialised
    children: list[int] = field(default_factory=list)

    @property
    def call(self) -> int:
        return self.turn.sequence

    @property
    def sequence(self) -> list[int] | None:
        """Prompt + completion tokens."""
        if self.prompt is None or self.completion is None:
            return None
        return [*self.prompt, *self.completion]


@dataclass
class Lineage:
    """Where a branch comes from: the earlier call it shares the longest token prefix with."""

    parent_branch: int | None  # the branch that call is trained in
    call: int | None  # None: nothing earlier shares a token
    shared: int  # tokens shared with that call's whole sequence
    kind: str  # fork (continues a call another branch continues too) | rewrite | new
    reason: str


@dataclass
class Branch:
    """One chain of calls: one token sample."""

    id: int
    calls: list[int]  # trained here, in order
    context: list[int]  # earlier calls in the prefix, trained in another branch
    lineage: Lineage | None  # None for the episode's first branch


@dataclass
class Conversation:
    """Calls chained by their messages, with each assistant turn as the upstream returned it."""

    calls: list[int]
    messages: list[Message]
    tools: list[dict[str, Any]]
    shared: int = 0  # leading calls an earlier conversation holds too
    unverified: int = 0  # assistant messages in the history before its first call: the
    # harness's copies, not replies the graph can tie to a recorded call


@dataclass
class Graph:
    episode: Episode
    nodes: dict[int, Node]
    branches: list[Branch]
    masked: list[Masked]

    def node(self, call: int) -> Node:
        return self.nodes[call]

    def branch_of(self, call: int) -> Branch:
        return next(b for b in self.branches if call in b.calls)

    def conversations(self) -> list[Conversation]:
        """The conversational view: one conversation per chain of `follows` edges."""
        return conversations(self)


# --- nodes ------------------------------------------------------------------------------------


def _node(turn: Turn, tokenizer: Any, masked: list[Masked]) -> Node:
    if turn.prompt_ids is not None and turn.completion_ids is not None:
        lp = turn.logprobs
        if lp is not None and len(lp) != len(turn.completion_ids):
            masked.append(Masked(turn.sequence, 0, f"call {turn.sequence}: {len(lp)} logprobs "
                                 f"for {len(turn.completion_ids)} tokens: logprobs dropped"))  # fmt: skip
            lp = None
        return Node(turn, list(turn.prompt_ids), list(turn.completion_ids), lp, RECORDED)
    if tokenizer is None:
        return Node(turn, None, None, None, None)
    prompt = render(tokenizer, turn.messages, turn.tools, True)
    full = render(tokenizer, [*turn.messages, turn.reply], turn.tools, False)
    k = common_prefix(prompt, full)
    if k < len(prompt):  # the template renders the prompt alone differently: no clear boundary
        masked.append(Masked(turn.sequence, len(full) - k, f"call {turn.sequence}: the chat "
                             f"template renders its prompt alone differently from prompt + reply "
                             f"(from token {k}): the completion's boundary would be a guess"))  # fmt: skip
        return Node(turn, full[:k], full[k:], None, RENDERED, trainable=False)
    return Node(turn, prompt, full[len(prompt) :], None, RENDERED)


# --- token edges and branches ----------------------------------------------------------------


def _link(nodes: list[Node]) -> None:
    """Each node's parent: the latest earlier node whose whole sequence its prompt extends."""
    for j, node in enumerate(nodes):
        if node.prompt is None:
            continue
        for earlier in reversed(nodes[:j]):
            seq = earlier.sequence
            if seq is not None and len(seq) <= len(node.prompt) and node.prompt[: len(seq)] == seq:
                node.parent = earlier.call
                earlier.children.append(node.call)
                break


def _lineage(node: Node, nodes: list[Node], owner: dict[int, int]) -> Lineage:
    best, shared = None, 0
    for earlier in nodes:
        if earlier.call >= node.call or earlier.sequence is None or node.prompt is None:
            continue
        k = common_prefix(earlier.sequence, node.prompt)
        if k >= shared or best is None:  # ties: the latest state it agrees with
            best, shared = earlier, k
    if best is None or shared == 0:
        return Lineage(
            None, None, 0, "new", f"call {node.call} shares no token with any earlier call"
        )
    seq = best.sequence or []
    if node.parent is not None:
        kind, reason = "fork", f"call {node.call} continues call {best.call}, as call " \
            f"{best.children[0]} does"  # fmt: skip
    elif shared >= len(best.prompt or []):
        kind, reason = "rewrite", f"call {node.call} keeps call {best.call}'s prompt but " \
            f"rewrites its reply (from token {shared} of {len(seq)})"  # fmt: skip
    else:
        kind, reason = "rewrite", f"call {node.call} rewrites the history it shares with call " \
            f"{best.call} from token {shared} of {len(seq)}"  # fmt: skip
    return Lineage(owner.get(best.call), best.call, shared, kind, reason)


def _branches(nodes: list[Node]) -> list[Branch]:
    by_call = {n.call: n for n in nodes}
    owner: dict[int, int] = {}  # call -> the branch that trains it
    branches: list[Branch] = []
    for node in nodes:
        if node.call in owner:
            continue
        parent = by_call.get(node.parent) if node.parent is not None else None
        context: list[int] = []
        while parent is not None:  # a fork: the shared calls are context here
            context.insert(0, parent.call)
            parent = by_call.get(parent.parent) if parent.parent is not None else None
        lineage = _lineage(node, nodes, owner) if branches else None
        branch = Branch(len(branches), [], context, lineage)
        cur: Node | None = node
        while cur is not None:
            branch.calls.append(cur.call)
            owner[cur.call] = branch.id
            cur = next((by_call[c] for c in cur.children if c not in owner), None)
        branches.append(branch)
    return branches


def build(episode: Episode, tokenizer: Any = None) -> Graph:
    """The episode's graph. Calls without token ids are rendered with `tokenizer` (none given:
    their tokens stay unknown, and only conversational exports can use them)."""
    masked: list[Masked] = []
    nodes = [_node(t, tokenizer, masked) for t in episode.turns]
    _link(nodes)
    _follow(nodes)
    return Graph(episode, {n.call: n for n in nodes}, _branches(nodes), masked)


# --- conversation edges ----------------------------------------------------------------------


def arguments_object(arguments: Any) -> Any:
    """Tool-call arguments as the object chat templates expect (`| tojson` would encode a JSON
    string a second time); text that is not a JSON object is left as it is."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments
        return value if isinstance(value, dict) else arguments
    return arguments


def _said(message: Message) -> tuple[str, list[tuple[str, Any]]]:
    """What an assistant message says, whatever its serialisation."""
    calls = [
        (c["function"]["name"], arguments_object(c["function"].get("arguments")))
        for c in message.get("tool_calls") or []
    ]
    return (message.get("content") or "").strip(), calls


def _follow(nodes: list[Node]) -> None:
    for j, node in enumerate(nodes):
        msgs = node.turn.messages
        for earlier in reversed(nodes[:j]):
            n = len(earlier.turn.messages)
            if len(msgs) <= n or msgs[:n] != earlier.turn.messages:
                continue
            resent, reply = msgs[n], earlier.turn.reply
            if resent.get("role") != "assistant" or _said(resent) != _said(reply):
                continue
            node.follows = earlier.call
            same = resent.get("content") == reply.get("content") and [
                c["function"].get("arguments") for c in resent.get("tool_calls") or []
            ] == [c["function"].get("arguments") for c in reply.get("tool_calls") or []]
            node.resent = "verbatim" if same else "reserialised"
            break


def with_object_arguments(message: Message) -> Message:
    """A chat-template message whose tool-call arguments are objects."""
    if not message.get("tool_calls"):
        return message
    calls = [
        {**c, "function": {**c["function"], "arguments": arguments_object(c["function"].get("arguments"))}}
        for c in message["tool_calls"]
    ]  # fmt: skip
    return {**message, "tool_calls": calls}


def _own_reply(reply: Message, resent: Message | None) -> Message:
    """The reply the upstream returned, with the tool-call ids the harness refers to it by."""
    if resent is None or not reply.get("tool_calls"):
        return reply
    ids = [c.get("id") for c in resent.get("tool_calls") or []]
    calls = [{**c, "id": ids[i] if i < len(ids) and ids[i] else c.get("id")}
             for i, c in enumerate(reply["tool_calls"])]  # fmt: skip
    return {**reply, "tool_calls": calls}


def conversations(graph: Graph) -> list[Conversation]:
    """One conversation per call no other call follows, chained back to the call it started
    from; calls two conversations share appear in both (`Conversation.shared`)."""
    nodes = list(graph.nodes.values())
    followed = {n.follows for n in nodes if n.follows is not None}
    out: list[Conversation] = []
    seen: set[int] = set()
    for end in (n for n in nodes if n.call not in followed):
        chain = [end]
        while chain[0].follows is not None:
            chain.insert(0, graph.nodes[chain[0].follows])
        messages = list(chain[0].turn.messages)
        for i, node in enumerate(chain):
            nxt = chain[i + 1].turn.messages if i + 1 < len(chain) else None
            resent = nxt[len(node.turn.messages)] if nxt is not None else None
            messages.append(_own_reply(node.turn.reply, resent))
            if nxt is not None:
                messages.extend(nxt[len(node.turn.messages) + 1 :])
        calls = [n.call for n in chain]
        unverified = sum(m.get("role") == "assistant" for m in chain[0].turn.messages)
        out.append(Conversation(calls, messages, chain[-1].turn.tools,
                                sum(c in seen for c in calls), unverified))  # fmt: skip
        seen.update(calls)
    return out
