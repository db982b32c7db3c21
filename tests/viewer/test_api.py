"""The viewer's API over crafted stores: paging and filters, rows appended while it runs, torn
tails, older files without newer columns, compacted Parquet, hostile artifact paths, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from pomona import trajectories
from pomona.proxy.appserver import AppServer
from pomona.trajectories.writer import TrajectoryWriter
from pomona.viewer.app import create_app

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def episode_row(key: str, task: str, attempt: int, *, run: str = "r1", status: str = "pass",
                **extra: Any) -> dict[str, Any]:  # fmt: skip
    infra = status == "infra"
    return {
        "episode": key, "run": run, "benchmark": "b", "task": task, "harness": "pi", "model": "m",
        "reward": None if infra else float(status == "pass"), "resolved": None if infra else status == "pass",
        "failure_kind": "sandbox" if infra else "none",
        "failure_message": "the sandbox was lost" if infra else None,
        "metadata": json.dumps({"attempt": attempt}), "num_calls": 1,
        "started_at": T0 + timedelta(seconds=attempt), "ended_at": T0 + timedelta(seconds=attempt + 1),
        **extra,
    }  # fmt: skip


def call_row(key: str, n: int, text: str = "hello") -> dict[str, Any]:
    request = {"model": "m", "messages": [{"role": "user", "content": text}]}
    response = {"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]}
    return {
        "call_id": f"{key}-{n}", "episode": key, "sequence": n, "side": False, "dialect": "chat",
        "request": json.dumps(request), "response": json.dumps(response), "status": "ok",
        "status_code": 200, "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
        "started_at": T0 + timedelta(seconds=n), "ended_at": T0 + timedelta(seconds=n, milliseconds=5),
        "latency_ms": 5.0,
    }  # fmt: skip


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[AppServer] = []

    def start(directory: Path) -> httpx.Client:
        server = AppServer(create_app(directory, refresh_interval=0)).start()
        servers.append(server)
        return httpx.Client(base_url=server.url, timeout=60)

    yield start
    for server in servers:
        server.stop()


def test_pages_and_filters_of_a_run(tmp_path: Path, serve: Any) -> None:
    with TrajectoryWriter(tmp_path, "episodes") as w:
        for t in range(120):
            for a in range(2):
                status = "infra" if t % 10 == 0 else ("pass" if (t + a) % 3 == 0 else "fail")
                w.write(episode_row(f"e{t}-{a}", f"task-{t:03d}", a, status=status))
        w.write(episode_row("other", "task-x", 0, run="r2"))
    api = serve(tmp_path)
    sizes = [len(api.get("/api/run/tasks", params={"run": "r1", "offset": o}).json()["tasks"])
             for o in (0, 50, 100)]  # fmt: skip
    assert sizes == [50, 50, 20]
    first = api.get("/api/run/tasks", params={"run": "r1"}).json()
    assert first["total"] == 120 and first["tasks"][0]["task"] == "task-000"
    assert [a["attempt"] for a in first["tasks"][1]["attempts"]] == [0, 1]
    infra = api.get("/api/run/tasks", params={"run": "r1", "status": "infra"}).json()
    assert infra["total"] == 12
    assert all(a["failure_kind"] == "sandbox" for t in infra["tasks"] for a in t["attempts"])
    found = api.get("/api/run/tasks", params={"run": "r1", "task": "TASK-11"}).json()
    assert [t["task"] for t in found["tasks"]] == [f"task-{n}" for n in range(110, 120)]
    page = api.get("/api/episodes", params={"status": "pass", "limit": 7, "offset": 7}).json()
    expected = sum(1 for t in range(120) for a in range(2) if t % 10 and (t + a) % 3 == 0) + 1
    assert page["total"] == expected and len(page["episodes"]) == 7
    runs = {r["run"]: r for r in api.get("/api/runs").json()["runs"]}
    assert runs["r1"]["episodes"] == 240 and runs["r1"]["infra"] == 24
    assert runs["r1"]["failures"] == {"sandbox": 24}
    assert runs["r2"]["passed"] == 1 and not runs["r1"]["live"]
    detail = api.get("/api/run", params={"run": "r1"}).json()
    (summary,) = detail["summaries"]
    assert set(summary["pass_at"]) == {"1", "2"} and summary["failures"] == {"sandbox": 24}


def test_a_judges_episodes_are_shown_as_such_and_counted_as_no_attempt(
    tmp_path: Path, serve: Any
) -> None:
    judge = {"metadata": json.dumps({"role": "judge", "of": "e0"}), "reward": None,
             "resolved": None, "harness": None}  # fmt: skip
    with TrajectoryWriter(tmp_path, "episodes") as w:
        w.write(episode_row("e0", "t0", 0, status="pass"))
        w.write(episode_row("e1", "t0", 1, status="fail"))
        w.write(episode_row("j0", "t0", 0, **judge))
        w.write(episode_row("j1", None, 0, **judge))  # Claw-Eval's judge names no task
    api = serve(tmp_path)
    (run,) = api.get("/api/runs").json()["runs"]
    assert (run["episodes"], run["tasks"], run["unscored"], run["helpers"]) == (2, 1, 0, 2)
    assert run["resolve_rate"] == 0.5
    (summary,) = api.get("/api/run", params={"run": "r1"}).json()["summaries"]
    assert (summary["trials"], summary["failures"]) == (2, {})
    (row,) = api.get("/api/leaderboard").json()["rows"]
    assert row["harness"] == "pi" and row["trials"] == 2
    judged = api.get("/api/episodes", params={"status": "judge"}).json()
    assert sorted(e["episode"] for e in judged["episodes"]) == ["j0", "j1"]


def test_rows_written_while_the_viewer_runs_appear(tmp_path: Path, serve: Any) -> None:
    calls = TrajectoryWriter(tmp_path, "calls")
    calls.write(call_row("live", 0))
    api = serve(tmp_path)
    overview = api.get("/api/overview").json()
    assert overview["calls"] == 1 and overview["live_writers"] == [os.getpid()]
    assert [e["episode"] for e in overview["in_flight"]] == ["live"]
    first = api.get("/api/episode", params={"key": "live"}).json()
    assert first["in_flight"] and len(first["calls"]) == 1
    calls.write(call_row("live", 1, "again"))
    with TrajectoryWriter(tmp_path, "episodes") as episodes:
        episodes.write(episode_row("live", "t", 0))
    later = api.get("/api/episode", params={"key": "live"}).json()
    assert not later["in_flight"] and [c["sequence"] for c in later["calls"]] == [0, 1]
    assert later["calls"][1]["messages"][0]["parts"][0]["text"] == "again"
    assert api.get("/api/overview").json()["version"] > overview["version"]
    calls.close()
    assert api.get("/api/overview").json()["live_writers"] == []


def test_each_message_of_an_episode_is_sent_once(tmp_path: Path, serve: Any) -> None:
    """A conversation re-sent in full every turn reaches the page once; a call's earlier
    messages come on demand."""
    conversation: list[dict[str, str]] = [{"role": "system", "content": "sys"}]
    with TrajectoryWriter(tmp_path, "calls") as w:
        for n in range(4):
            conversation = [*conversation, {"role": "user", "content": f"turn {n}"}]
            w.write({**call_row("g", n), "request": json.dumps({"messages": conversation})})
    api = serve(tmp_path)
    calls = api.get("/api/episode", params={"key": "g"}).json()["calls"]
    assert [c["earlier"] for c in calls] == [0, 2, 3, 4]
    shown = [[m["parts"][0]["text"] for m in c["messages"]] for c in calls]
    assert shown == [["sys", "turn 0"], ["turn 1"], ["turn 2"], ["turn 3"]]
    full = api.get("/api/episode/call", params={"key": "g", "n": 3}).json()["messages"]
    assert [m["parts"][0]["text"] for m in full] == ["sys", "turn 0", "turn 1", "turn 2", "turn 3"]
    assert [m["new"] for m in full] == [False, False, False, False, True]
    assert api.get("/api/episode/call", params={"key": "g", "n": 4}).status_code == 404


def test_a_run_is_running_while_its_writer_is_at_work(tmp_path: Path, serve: Any) -> None:
    episodes = TrajectoryWriter(tmp_path, "episodes")
    episodes.write(episode_row("a", "t", 0))  # ended long ago
    api = serve(tmp_path)
    assert api.get("/api/overview").json()["live_runs"] == []
    calls = TrajectoryWriter(tmp_path, "calls")
    calls.write(call_row("b", 0))  # the same process has an episode in flight
    assert api.get("/api/overview").json()["live_runs"] == ["r1"]
    now = datetime.now(UTC)
    episodes.write(episode_row("b", "t", 1, started_at=now, ended_at=now))
    busy = api.get("/api/overview").json()
    assert busy["live_runs"] == ["r1"] and busy["in_flight"] == []  # it just finished one
    assert api.get("/api/runs").json()["runs"][0]["live"] is True
    calls.close()
    episodes.close()  # end-of-stream markers: no new rows, but the run is over
    done = api.get("/api/overview").json()
    assert done["live_runs"] == [] and done["version"] == busy["version"]
    assert api.get("/api/runs").json()["runs"][0]["live"] is False


def test_an_episode_in_flight_shows_under_its_run(tmp_path: Path, serve: Any) -> None:
    """Each call names the run its episode was opened in, so a run is listed, running, from its
    first call, before any of its episodes has ended; a call that names no run (an older store,
    an episode opened without one) stays in flight outside any run."""
    calls = TrajectoryWriter(tmp_path, "calls")
    opened = {"run": "r-new", "benchmark": "b", "task": "t7", "harness": "pi"}
    for n in range(2):
        calls.write({**call_row("fly", n), **opened, "model": "m"})
    calls.write(call_row("anon", 0))
    api = serve(tmp_path)
    listed = api.get("/api/runs").json()
    (run,) = listed["runs"]
    assert (run["run"], run["live"], run["in_flight"], run["episodes"]) == ("r-new", True, 1, 0)
    assert (run["benchmark"], run["harness"], run["model"]) == ("b", "pi", "m")
    flying = {e["episode"]: e for e in listed["in_flight"]}
    assert {k: flying["fly"][k] for k in opened} == opened and flying["fly"]["calls"] == 2
    assert flying["anon"]["run"] is None
    detail = api.get("/api/run", params={"run": "r-new"}).json()
    assert [e["episode"] for e in detail["in_flight_episodes"]] == ["fly"]
    assert detail["summaries"] == [] and detail["live"]
    assert api.get("/api/run/tasks", params={"run": "r-new"}).json()["total"] == 0
    page = api.get("/api/episode", params={"key": "fly"}).json()
    assert page["in_flight"] and page["opened_as"] == {**opened, "model": "m"}
    with TrajectoryWriter(tmp_path, "episodes") as episodes:
        now = datetime.now(UTC)
        episodes.write(episode_row("fly", "t7", 0, run="r-new", started_at=now, ended_at=now))
    (ended,) = api.get("/api/runs").json()["runs"]  # the episode joined its run's results
    assert (ended["run"], ended["in_flight"], ended["episodes"], ended["passed"]) == (
        "r-new",
        0,
        1,
        1,
    )
    assert api.get("/api/episode", params={"key": "fly"}).json()["opened_as"] is None
    calls.close()
    assert api.get("/api/run", params={"run": "r-new"}).json()["in_flight_episodes"] == []


def test_a_torn_tail_is_skipped_until_it_is_whole(tmp_path: Path, serve: Any) -> None:
    writer = TrajectoryWriter(tmp_path, "calls")
    writer.write(call_row("e", 0))
    writer.write(call_row("e", 1))
    writer.close()
    whole = writer.path.read_bytes()
    dead = tmp_path / "calls-20200101T000000-999999999-deadbeef.arrows"  # no such writer pid
    writer.path.rename(dead)
    dead.write_bytes(whole[: len(whole) - 8 - 40])  # the second batch loses its end, and EOS
    api = serve(tmp_path)
    torn = api.get("/api/overview").json()
    assert torn["calls"] == 1 and torn["torn_files"] == [dead.name]
    dead.write_bytes(whole)  # the rest of the row arrives after all
    whole_again = api.get("/api/overview").json()
    assert whole_again["calls"] == 2 and whole_again["torn_files"] == []


def test_older_files_without_newer_columns(tmp_path: Path, serve: Any) -> None:
    """A file written before the schema grew: missing columns and struct fields read as null."""
    old_usage = pa.struct(
        [pa.field("input_tokens", pa.int64()), pa.field("output_tokens", pa.int64())]
    )
    schema = pa.schema([pa.field("call_id", pa.string()), pa.field("episode", pa.string()),
                        pa.field("dialect", pa.string()), pa.field("request", pa.string()),
                        pa.field("usage", old_usage), pa.field("started_at", pa.timestamp("us", tz="UTC"))])  # fmt: skip
    row = {"call_id": "c0", "episode": "old", "dialect": "chat", "started_at": T0,
           "request": json.dumps({"messages": [{"role": "user", "content": "from long ago"}]}),
           "usage": {"input_tokens": 4, "output_tokens": 1}}  # fmt: skip
    with (
        open(tmp_path / "calls-20200101T000000-1-deadbeef.arrows", "wb") as f,
        pa.ipc.new_stream(f, schema) as w,
    ):
        w.write_table(pa.Table.from_pylist([row], schema=schema))
    api = serve(tmp_path)
    data = api.get("/api/episode", params={"key": "old"}).json()
    (call,) = data["calls"]
    assert call["usage"] == {"input_tokens": 4, "output_tokens": 1, "total_tokens": None}
    assert call["status"] is None and call["messages"][0]["parts"][0]["text"] == "from long ago"
    assert data["totals"]["input_tokens"] == 4


def test_a_store_compacted_while_the_viewer_runs(tmp_path: Path, serve: Any) -> None:
    with TrajectoryWriter(tmp_path, "calls") as w:
        for n in range(3):
            w.write(call_row("p", n))
    with TrajectoryWriter(tmp_path, "episodes") as w:
        w.write(episode_row("p", "t", 0))
    api = serve(tmp_path)

    def answers() -> list[str]:
        data = api.get("/api/episode", params={"key": "p"}).json()
        return [c["answer"][0]["parts"][0]["text"] for c in data["calls"]]

    assert answers() == ["answer 0", "answer 1", "answer 2"]
    for table in ("calls", "episodes"):
        trajectories.compact(tmp_path, table)
    assert not list(tmp_path.glob("*.arrows"))
    assert answers() == ["answer 0", "answer 1", "answer 2"]
    raw = api.get("/api/episode/raw", params={"key": "p"}).json()
    assert json.loads(raw["calls"][2]["response"])["choices"][0]["message"]["content"] == "answer 2"
    assert api.get("/api/overview").json()["calls"] == 3


def test_artifacts_are_served_only_from_inside_the_store(tmp_path: Path, serve: Any) -> None:
    store = tmp_path / "runs"
    (store / "artifacts" / "e").mkdir(parents=True)
    inside = store / "artifacts" / "e" / "transcript.jsonl"
    inside.write_text('{"role": "user", "content": "<script>alert(1)</script>"}\n')
    (store / "artifacts" / "e" / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 32)
    (store / "artifacts" / "e" / "page.html").write_text("<script>alert(1)</script>")
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    (store / "artifacts" / "e" / "link.txt").symlink_to(secret)
    named = [("transcript.jsonl", inside.as_uri()), ("shot.png", (inside.parent / "shot.png").as_uri()),
             ("page.html", (inside.parent / "page.html").as_uri()), ("passwd", "file:///etc/passwd"),
             ("link.txt", (inside.parent / "link.txt").as_uri()),
             ("dots", f"file://{store}/artifacts/e/../../../secret.txt"),
             ("remote", "http://example.invalid/x"), ("relative", "artifacts/e/transcript.jsonl")]  # fmt: skip
    with TrajectoryWriter(store, "episodes") as w:
        w.write(episode_row("e", "t", 0, artifacts=[{"name": n, "uri": u} for n, u in named]))
    api = serve(store)
    listed = api.get("/api/episode", params={"key": "e"}).json()["artifacts"]
    assert [a["kind"] for a in listed[:3]] == ["transcript", "image", "text"]
    assert [a["problem"] is None for a in listed] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        True,
    ]

    def get(i: int, **q: Any) -> httpx.Response:
        return api.get("/api/episode/artifact", params={"key": "e", "index": i, **q})

    text = get(0)
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    assert "sandbox" in text.headers["content-security-policy"]
    assert get(1).headers["content-type"] == "image/png"
    assert get(2).headers["content-type"].startswith("text/plain")  # never served as HTML
    for i in (3, 4, 5, 6):
        refused = get(i)
        assert (
            refused.status_code == 403
            and "private" not in refused.text
            and "root:" not in refused.text
        )
    assert get(7, preview="true").json()["text"].startswith('{"role"')
    assert get(8).status_code == 404


def test_bad_input_gets_clear_json_errors(tmp_path: Path, serve: Any) -> None:
    with TrajectoryWriter(tmp_path, "episodes") as w:
        w.write(episode_row("e", "t", 0))
    api = serve(tmp_path)
    assert api.get("/api/episodes", params={"limit": 0}).status_code == 422
    assert api.get("/api/episodes", params={"limit": 10**6}).status_code == 422
    assert api.get("/api/episodes", params={"offset": -1}).status_code == 422
    missing = api.get("/api/episode", params={"key": "nope"})
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]
    assert api.get("/api/run", params={"run": "nope"}).status_code == 404
    assert api.post("/api/episodes").status_code == 405
    assert api.get("/api/episodes", params={"offset": 10**6}).json()["episodes"] == []


def test_a_store_that_does_not_exist_yet(tmp_path: Path, serve: Any) -> None:
    api = serve(tmp_path / "later")
    assert api.get("/api/runs").json() == {"runs": [], "in_flight": []}
    assert api.get("/api/leaderboard").json()["rows"] == []
    assert api.get("/api/leaderboard.png").status_code == 404
    with TrajectoryWriter(tmp_path / "later", "episodes") as w:
        w.write(episode_row("e", "t", 0))
    assert len(api.get("/api/runs").json()["runs"]) == 1


def test_the_command_line_serves_and_says_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "pomona.cli",
        "view",
        str(tmp_path / "runs"),
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "does not exist yet" in proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in proc.stdout.readline()  # printed once listening
        for _ in range(600):  # the app finishes starting
            with contextlib.suppress(httpx.TransportError):
                overview = httpx.get(f"http://127.0.0.1:{port}/api/overview", timeout=30).json()
                break
            time.sleep(0.1)
        assert overview["episodes"] == 0
        taken = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert taken.returncode == 2 and "choose another --port" in taken.stderr
    finally:
        proc.terminate()
        proc.wait(60)
