"""Group-normalised advantages (GRPO): attempts at the same task form a group, and each one's
advantage is its reward against the group's.

    A_i = (r_i - mean(r)) / (std(r) + eps)      std with Bessel's correction, as TRL and slime
    A_i =  r_i - mean(r)                        with scale=False (Dr. GRPO)

A group whose rewards do not vary (std < 1e-6) teaches nothing and is dropped, as is one with
fewer than two scored attempts. Attempts without a reward (infra failures) are not members:
they are not evidence about the policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MIN_STD = 1e-6


def normalise(
    rewards: Sequence[float], *, scale: bool = True, eps: float = 1e-6
) -> list[float] | None:
    """The group's advantages, or None when the group carries no signal."""
    n = len(rewards)
    if n < 2:
        return None
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    if std < MIN_STD:
        return None
    return [(r - mean) / (std + eps) if scale else r - mean for r in rewards]


@dataclass
class Group:
    key: Hashable
    members: list[Any]
    rewards: list[float]
    advantages: list[float] | None  # None: dropped
    excluded: list[Any] = field(default_factory=list)  # attempts without a reward

    @property
    def dropped(self) -> bool:
        return self.advantages is None

    def advantage_of(self, member: Any) -> float | None:
        if self.advantages is None:
            return None
        return next(
            (a for m, a in zip(self.members, self.advantages, strict=True) if m is member), None
        )


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def groups(
    items: Iterable[Any],
    *,
    key: Callable[[Any], Hashable] | str = "task",
    reward: Callable[[Any], float | None] | str = "reward",
    scale: bool = True,
) -> list[Group]:
    """Group attempts (EpisodeRecords, episodes rows, samples: anything with the key and reward
    fields) and compute each group's advantages, in first-seen order."""
    key_of = key if callable(key) else (lambda x: _field(x, key))
    reward_of = reward if callable(reward) else (lambda x: _field(x, reward))
    by_key: dict[Hashable, Group] = {}
    for item in items:
        group = by_key.setdefault(key_of(item), Group(key_of(item), [], [], None))
        r = reward_of(item)
        if r is None or (isinstance(r, float) and math.isnan(r)):
            group.excluded.append(item)
        else:
            group.members.append(item)
            group.rewards.append(float(r))
    for group in by_key.values():
        group.advantages = normalise(group.rewards, scale=scale)
    return list(by_key.values())


def kept(all_groups: Iterable[Group]) -> list[Group]:
    """The groups that carry signal (zero-variance and singleton groups dropped)."""
    return [g for g in all_groups if not g.dropped]
