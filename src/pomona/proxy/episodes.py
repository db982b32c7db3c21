"""Episodes: what a per-episode base URL (`/e/<key>/v1`) stands for, and its running state."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pomona.proxy.dialects import TokenData
from pomona.proxy.errors import EpisodeExists
from pomona.proxy.policy import POLICY, Policy
from pomona.trajectories.faithfulness import Verdict, judge


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_key() -> str:
    """An unguessable, URL-safe episode key: the credential of its /e/KEY/ base URL."""
    return secrets.token_urlsafe(12)


@dataclass
class Episode:
    key: str
    model: str | None = None  # overrides the model the client asks for; None: use the client's
    script: list[str | list[str]] = field(default_factory=list)  # a list: parallel calls
    metadata: dict[str, Any] = field(default_factory=dict)
    final: str = "done"  # the scripted model's last message
    tool_less_is_side: bool = True  # False: tool-less calls are policy turns (text protocols)
    policy: Policy | None = None  # model "policy": calls wait for an outside policy's reply
    opened_at: datetime = field(default_factory=utcnow)
    closed_at: datetime | None = None
    calls: int = 0
    _sequences: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    _main_judged: int = 0
    _last_tokens: list[int] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.model == POLICY and self.policy is None:
            self.policy = Policy()

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def next_sequence(self, side: bool) -> int:
        """Main turns and side calls are numbered separately, so side calls never shift turns."""
        with self._lock:
            n = self._sequences[side]
            self._sequences[side] = n + 1
            self.calls += 1
            return n

    def judge_tokens(self, tokens: TokenData) -> Verdict:
        """Token-faithfulness verdict for the next completed main call, and remember its tokens."""
        with self._lock:
            if tokens.prompt_ids is None:
                verdict = Verdict(None, "upstream returned no prompt token ids")
            elif self._main_judged and self._last_tokens is None:
                verdict = Verdict(None, "previous main call has no token ids")
            else:
                verdict = judge(tokens.prompt_ids, self._last_tokens)
            prompt, completion = tokens.prompt_ids, tokens.completion_ids
            complete = None if prompt is None or completion is None else [*prompt, *completion]
            self._last_tokens = complete
            self._main_judged += 1
            return verdict

    def public(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "model": self.model,
            "metadata": self.metadata,
            "calls": self.calls,
            "main_calls": self._sequences[False],
            "side_calls": self._sequences[True],
            "closed": self.closed,
        }


class Episodes:
    """The episodes a proxy knows, by key. Thread-safe: the in-process API and HTTP share it."""

    def __init__(self) -> None:
        self._by_key: dict[str, Episode] = {}
        self._lock = threading.Lock()

    def add(self, episode: Episode) -> Episode:
        """Register a new episode; its key must be free."""
        with self._lock:
            if episode.key in self._by_key:
                raise EpisodeExists(episode.key)
            self._by_key[episode.key] = episode
            return episode

    def get(self, key: str) -> Episode | None:
        return self._by_key.get(key)

    def close(self, key: str, when: datetime | None = None) -> Episode:
        ep = self._by_key[key]
        if ep.closed_at is None:
            ep.closed_at = when or utcnow()
        if ep.policy is not None:
            ep.policy.close()
        return ep
