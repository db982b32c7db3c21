"""verl's reward function for `pomona export rl --format verl`: the score the recording earned.

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` for a response
(`reward.custom_reward_function.path` = this file, `.name` = compute_score). A recorded episode
was scored by its benchmark's own scorer in the sandbox it ran in; the export writes that reward
as the row's numeric `reward_model.ground_truth`, and this returns it. It scores the recorded
response only (replayed by `verl_agent_loop.RecordedAgentLoop`): a response verl generates anew
is an episode of its own and must be played and scored through Pomona, so a row without a
recorded score is refused rather than given a number.

It imports nothing heavy: verl loads it by path, in verl's own environment.
"""

from __future__ import annotations

from typing import Any

from pomona.errors import PomonaError


class NoRecordedScore(PomonaError, ValueError):
    """The row carries no score from a recorded, scored episode."""


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """The recorded episode's reward (its benchmark's score) for its recorded response."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, int | float):
        episode = (extra_info or {}).get("episode")
        raise NoRecordedScore(
            f"{data_source} row of episode {episode!r}: ground_truth {ground_truth!r} is not a "
            "recorded score (export the episodes with `pomona export rl --format verl`; a new "
            "response is scored by playing it through Pomona, not by this function)"
        )
    return float(ground_truth)
