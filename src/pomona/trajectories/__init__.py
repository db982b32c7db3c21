"""Trajectories: Arrow tables of every model call (`calls`) and every episode (`episodes`).

from pomona import trajectories
calls = trajectories.read(DIR, "calls")      # a pyarrow.Table
"""

from pomona.trajectories.faithfulness import Verdict, judge
from pomona.trajectories.reader import (
    ReadReport,
    TornTrajectoryWarning,
    compact,
    read,
    read_with_report,
    to_datasets,
    to_pandas,
)
from pomona.trajectories.redact import redact_body, redact_headers
from pomona.trajectories.schema import CALLS, EPISODES, FAILURE_KINDS, SCHEMA_VERSION, schema_for
from pomona.trajectories.writer import TrajectoryWriter

__all__ = [
    "CALLS",
    "EPISODES",
    "FAILURE_KINDS",
    "SCHEMA_VERSION",
    "ReadReport",
    "TornTrajectoryWarning",
    "TrajectoryWriter",
    "Verdict",
    "compact",
    "judge",
    "read",
    "read_with_report",
    "redact_body",
    "redact_headers",
    "schema_for",
    "to_datasets",
    "to_pandas",
]
