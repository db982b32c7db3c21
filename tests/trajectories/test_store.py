"""The trajectory store: crash-safe appends, torn-tail reading, conversions, compaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pyarrow as pa
import pytest

from pomona import trajectories
from pomona.trajectories import TornTrajectoryWarning, TrajectoryWriter, judge


def _call(i: int, **kw) -> dict:
    return {"call_id": f"c{i}", "episode": "e1", "sequence": i, "side": False, "dialect": "chat", "status": "ok",
            "request": '{"messages": []}', "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
            "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4], **kw}  # fmt: skip


def test_round_trip_schema_version_and_conversions(tmp_path):
    with TrajectoryWriter(tmp_path, "calls") as w:
        for i in range(3):
            w.write(_call(i))
    with TrajectoryWriter(tmp_path, "episodes") as w:
        w.write(
            {
                "episode": "e1",
                "task": "t",
                "reward": 1.0,
                "resolved": True,
                "failure_kind": "none",
                "artifacts": {"patch": "p.diff"},
            }
        )
    table = trajectories.read(tmp_path, "calls")
    assert (
        table.num_rows == 3
        and table.schema.metadata[b"pomona.schema_version"] == trajectories.SCHEMA_VERSION.encode()
    )
    assert table.column("prompt_token_ids").to_pylist()[0] == [1, 2, 3]
    df = trajectories.to_pandas(tmp_path, "calls")
    assert list(df["sequence"]) == [0, 1, 2]
    ds = trajectories.to_datasets(tmp_path, "episodes")
    assert ds[0]["task"] == "t" and ds[0]["reward"] == 1.0


def test_types_are_checked_before_anything_is_written(tmp_path):
    w = TrajectoryWriter(tmp_path, "episodes")
    with pytest.raises(ValueError, match="failure_kind"):
        w.write({"episode": "e", "failure_kind": "oops"})
    with pytest.raises(ValueError, match="unknown episodes columns"):
        w.write({"episode": "e", "rewrad": 1})
    with pytest.raises(ValueError, match="unknown trajectory table"):
        TrajectoryWriter(tmp_path, "cals")
    assert list(tmp_path.iterdir()) == []


def test_concurrent_writers_use_separate_files(tmp_path):
    a, b = TrajectoryWriter(tmp_path, "calls"), TrajectoryWriter(tmp_path, "calls")
    a.write(_call(0))
    b.write(_call(1))
    a.write(_call(2))
    assert a.path != b.path
    assert sorted(trajectories.read(tmp_path).column("call_id").to_pylist()) == ["c0", "c1", "c2"]


def test_truncation_at_every_offset_of_the_last_record(tmp_path):
    """Whatever byte a crash stops at, every earlier call is read and the tail is reported."""
    w = TrajectoryWriter(tmp_path / "src", "calls")
    w.write(_call(0))
    w.write(_call(1))
    two = w.path.stat().st_size
    w.write(_call(2))
    three = w.path.stat().st_size
    data = w.path.read_bytes()
    for cut in range(two + 1, three, 97):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / w.path.name).write_bytes(data[:cut])
        table, report = trajectories.read_with_report(d, "calls")
        assert table.column("call_id").to_pylist() == ["c0", "c1"]
        (torn,) = report.torn
        assert torn.rows == 2 and torn.dropped_bytes == cut - two
        with pytest.warns(TornTrajectoryWarning, match="dropped a torn tail"):
            trajectories.read(d, "calls")


def test_a_file_torn_inside_its_schema_is_skipped_and_reported(tmp_path):
    w = TrajectoryWriter(tmp_path, "calls")
    w.write(_call(0))
    os.truncate(w.path, 20)
    table, report = trajectories.read_with_report(tmp_path, "calls")
    assert table.num_rows == 0 and report.torn[0].rows == 0


WRITER = textwrap.dedent(
    """
    import sys
    from pomona.trajectories import TrajectoryWriter
    w = TrajectoryWriter(sys.argv[1], "calls")
    i = 0
    while True:
        w.write({"call_id": f"c{i}", "sequence": i, "request": "x" * (i % 5000), "status": "ok"})
        print(i, flush=True)  # only after the row is flushed to the OS
        i += 1
    """
)


def test_sigkill_mid_write_loses_no_earlier_call(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    for line in proc.stdout:
        if int(line) >= 300:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    acknowledged = int(line) + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTrajectoryWarning)
        table, report = trajectories.read_with_report(tmp_path, "calls")
    ids = table.column("sequence").to_pylist()
    assert ids == list(range(len(ids))) and len(ids) >= acknowledged
    assert report.rows == len(ids)


def test_compact_to_parquet(tmp_path):
    for i in range(3):
        with TrajectoryWriter(tmp_path, "calls") as w:
            w.write_many([_call(10 * i + j) for j in range(4)])
    before = trajectories.read(tmp_path).sort_by("call_id")
    out = trajectories.compact(tmp_path, "calls")
    assert out.suffix == ".parquet" and [p.name for p in tmp_path.iterdir()] == [out.name]
    after = trajectories.read(tmp_path).sort_by("call_id")
    assert after.equals(before)
    with TrajectoryWriter(tmp_path, "calls") as w:  # new calls after compaction are read alongside
        w.write(_call(99))
    assert trajectories.read(tmp_path).num_rows == 13
    assert isinstance(trajectories.read(tmp_path / "nothing-here", "calls"), pa.Table)


def test_token_faithfulness_verdicts():
    assert judge([1, 2], None).faithful is True
    ok = judge([1, 2, 3, 4, 5], [1, 2, 3])
    assert ok.faithful is True and "extends" in ok.reason
    bad = judge([1, 9, 3, 4], [1, 2, 3])
    assert bad.faithful is False and "token 1" in bad.reason
    short = judge([1, 2], [1, 2, 3])
    assert short.faithful is False and "shorter" in short.reason
    assert judge(None, [1]).faithful is None


def test_redaction():
    from pomona.trajectories import redact_body, redact_headers

    assert redact_headers({"Authorization": "Bearer s", "X-Api-Key": "s", "accept": "x"}) == {
        "Authorization": "[REDACTED]", "X-Api-Key": "[REDACTED]", "accept": "x",
    }  # fmt: skip
    raw = '{"model":"m","messages":[]}'
    assert redact_body(raw) is raw  # untouched bodies stay byte-identical
    assert "sk-1" not in redact_body('{"model":"m","extra":{"api_key":"sk-1"}}')
