"""The leaderboard reads stored episodes, ranks them and renders a table and an HTML page."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pomona.benchmarks import leaderboard
from pomona.cli import main
from pomona.trajectories import TrajectoryWriter


def write_episodes(directory: Path) -> None:
    now = datetime.now(UTC)
    rows = []
    for harness, passes in (("pi", 2), ("codex", 1), ("claude-code", 0)):
        for i in range(2):
            rows.append(
                {
                    "episode": f"{harness}-{i}",
                    "benchmark": "swe-local",
                    "task": f"t{i}",
                    "harness": harness,
                    "model": "qwen",
                    "reward": float(i < passes),
                    "resolved": i < passes,
                    "failure_kind": "none",
                    "started_at": now,
                    "ended_at": now,
                }
            )
    rows.append(
        {
            "episode": "x",
            "benchmark": "swe-local",
            "task": "t0",
            "harness": "pi",
            "model": "qwen",
            "reward": None,
            "resolved": None,
            "failure_kind": "verifier",
            "started_at": now,
            "ended_at": now,
        }
    )
    with TrajectoryWriter(directory, "episodes") as w:
        w.write_many(rows)


def test_ranked_table_and_html(tmp_path: Path, capsys) -> None:
    write_episodes(tmp_path / "runs")
    board = leaderboard.leaderboard(tmp_path / "runs")
    assert [s.harness for s in board] == ["pi", "codex", "claude-code"]
    assert board[0].failures == {"verifier": 1} and board[0].resolve_rate == 1.0
    table = leaderboard.format_table(board)
    assert "verifier 1" in table and "50.0" in table
    assert (
        main(
            [
                "leaderboard",
                "--trajectories",
                str(tmp_path / "runs"),
                "--html",
                str(tmp_path / "lb.html"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[2].split()[:3] == ["swe-local", "pi", "qwen"]
    page = (tmp_path / "lb.html").read_text()
    assert "data:image/png;base64," in page and "claude-code" in page


def test_empty_store(tmp_path: Path) -> None:
    assert leaderboard.leaderboard(tmp_path / "nothing") == []
    assert leaderboard.format_table([]) == "no episodes recorded yet"
