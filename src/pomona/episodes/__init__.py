"""The episode engine: one attempt of one task, played by an agent, scored, and written as its
`episodes` row; and the driver that plays many at once. Every caller uses it: `pomona run`, the
Gymnasium environments, the trainer's group rollouts.

    record = run_episode(task, "pi", "oracle", proxy=proxy, client=client)
    records = await rollout(tasks, "pi", "oracle", n=4, concurrency=8)

Modules: agents.py (who plays: the Agent protocol and one class per kind; policy.py, a harness
answered by a Python function), attempt.py (one attempt's bookkeeping, to its row), rows.py
(the row writer and artifacts), record.py (EpisodeRecord), engine.py (one episode), rollouts.py
(many, with live progress). Where an attempt plays is a Stage (pomona.benchmarks.stage).
"""

from __future__ import annotations

from pomona.episodes.engine import ORACLE, SCRIPTED, run_episode
from pomona.episodes.record import EpisodeRecord
from pomona.episodes.rollouts import Progress, rollout, summary

__all__ = ["ORACLE", "SCRIPTED", "EpisodeRecord", "Progress", "rollout", "run_episode", "summary"]
