"""Several recorders, one logical trajectory store: real `pomona proxy` processes on a shared
directory and on an S3-compatible object store (moto's server, a real HTTP S3 endpoint from
PyPI), plain writer processes, a SIGKILLed writer whose spool the next one uploads, and readers
that merge it all."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pomona import trajectories
from pomona.trajectories import storage

BUCKET = "pomona-runs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {limit} s")


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback, credentials for it, and the bucket."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", server)
        httpx.put(f"http://127.0.0.1:{port}/{BUCKET}", timeout=10).raise_for_status()
        yield {**env, "endpoint": f"127.0.0.1:{port}"}
    finally:
        server.terminate()
        server.wait(30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def s3_uri(env: dict[str, str], prefix: str) -> str:
    return (
        f"s3://{BUCKET}/{prefix}?endpoint_override={env['endpoint']}&scheme=http&region=us-east-1"
    )


def _row(i: int, writer: str) -> dict:
    return {"call_id": f"{writer}-{i}", "episode": writer, "sequence": i, "status": "ok"}


WRITER = textwrap.dedent("""
    import sys
    from pomona.trajectories.storage import open_writer
    location, name, count, segment, spool = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    w = open_writer(location, "calls", segment_rows=segment, spool=spool)
    for i in range(count):
        w.write({"call_id": f"{name}-{i}", "episode": name, "sequence": i, "status": "ok"})
    print("written", flush=True)
    if sys.argv[6] == "hang":
        import time; time.sleep(600)
    w.close()
""")


def _writer(
    location: str, name: str, count: int, segment: int, spool: Path, then: str = "close"
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, location, name, str(count), str(segment), str(spool), then],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_location_survives_pathlib():
    assert storage.location_of(Path("s3://bucket/runs")) == "s3://bucket/runs"
    assert storage.is_uri(Path("s3://bucket/runs")) and not storage.is_uri("runs/s3")
    with pytest.raises(ValueError, match="cannot open trajectory store"):
        storage.filesystem("nosuchscheme://x/y")


def test_writer_processes_on_one_object_store_merge(s3_env, tmp_path):
    location = s3_uri(s3_env, "merge")
    procs = [_writer(location, f"w{n}", 23, 5, tmp_path / f"spool{n}") for n in range(3)]
    for p in procs:
        assert p.wait(120) == 0
    table = trajectories.read(location, "calls")
    assert sorted(table.column("call_id").to_pylist()) == sorted(
        f"w{n}-{i}" for n in range(3) for i in range(23)
    )
    _, report = trajectories.read_with_report(location, "calls")
    assert (
        len(report.files) == 3 * 5
    )  # 23 rows in segments of 5: four full and one of three, per writer
    assert all(f.path.startswith(f"s3://{BUCKET}/merge/calls-") and f.whole for f in report.files)


def test_a_killed_writer_loses_no_written_row(s3_env, tmp_path):
    location = s3_uri(s3_env, "killed")
    spool = tmp_path / "spool"
    victim = _writer(location, "victim", 7, 1000, spool, then="hang")  # nothing sealed yet
    assert victim.stdout.readline().strip() == "written"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert trajectories.read(location, "calls").num_rows == 0  # only in the spool so far
    successor = storage.SegmentWriter(location, "calls", spool=spool)
    try:
        assert successor.recovered == 1
        successor.write(_row(0, "successor"))
    finally:
        successor.close()
    ids = trajectories.read(location, "calls").column("call_id").to_pylist()
    assert sorted(ids) == sorted([f"victim-{i}" for i in range(7)] + ["successor-0"])
    assert list((spool).rglob("*.arrows")) == []


def test_a_live_writers_spool_is_never_taken(s3_env, tmp_path):
    location = s3_uri(s3_env, "live")
    spool = tmp_path / "spool"
    first = storage.SegmentWriter(location, "calls", spool=spool, segment_rows=1000)
    try:
        first.write(_row(0, "first"))
        second = storage.SegmentWriter(location, "calls", spool=spool)
        assert second.recovered == 0
        second.close()
    finally:
        first.close()
    assert trajectories.read(location, "calls").column("call_id").to_pylist() == ["first-0"]


def test_a_failing_store_keeps_rows_spooled(s3_env, tmp_path):
    """A store that refuses the upload (here: its bucket is gone): close says so, and the row
    stays on local disk for the next writer to upload."""
    location = s3_uri(s3_env, "x").replace(BUCKET, "no-such-bucket")
    writer = storage.SegmentWriter(
        location, "calls", spool=tmp_path / "spool", segment_rows=1000, segment_seconds=3600
    )
    writer.write(_row(0, "w"))
    with pytest.raises(OSError, match="(?i)bucket"):
        writer.close()
    assert len(list((tmp_path / "spool").rglob("*.arrows"))) == 1


def _proxy(store: str, port: int, spool: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pomona.cli", "proxy", "--port", str(port), "--trajectories", store],
        env={
            **os.environ,
            **env,
            "POMONA_TRAJECTORY_SPOOL": str(spool),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _episode_through(port: int, name: str) -> str:
    from openai import OpenAI

    base = f"http://127.0.0.1:{port}"
    opened = httpx.post(
        f"{base}/episodes",
        json={"model": "scripted", "script": ["echo " + name], "metadata": {"run": "scale"}},
        timeout=30,
    ).json()
    client = OpenAI(base_url=opened["base_url"], api_key="unused")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            },
        }
    ]
    reply = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "go"}], tools=tools
    )
    assert json.loads(reply.choices[0].message.tool_calls[0].function.arguments) == {
        "command": "echo " + name
    }
    httpx.post(f"{base}/episodes/{opened['key']}/close", json={}, timeout=30).raise_for_status()
    return opened["key"]


@pytest.mark.parametrize("where", ["shared-directory", "object-store"])
def test_several_proxy_replicas_record_one_store(where, request, tmp_path):
    if where == "object-store":
        env = request.getfixturevalue("s3_env")
        store = s3_uri(env, "proxies")
        extra = {k: v for k, v in env.items() if k != "endpoint"}
    else:
        store, extra = str(tmp_path / "shared-volume"), {}
    ports = [_free_port(), _free_port()]
    proxies = [_proxy(store, port, tmp_path / f"spool-{n}", extra) for n, port in enumerate(ports)]
    try:
        for port, proc in zip(ports, proxies, strict=True):
            _wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        keys = [
            _episode_through(port, f"replica-{n}") for n, port in enumerate(ports) for _ in range(2)
        ]
    finally:
        for proc in proxies:
            proc.send_signal(signal.SIGTERM)  # shutdown seals what is spooled
        for proc in proxies:
            proc.wait(60)
    calls = trajectories.read(store, "calls")
    episodes = trajectories.read(store, "episodes")
    assert sorted(set(calls.column("episode").to_pylist())) == sorted(keys)
    assert sorted(episodes.column("episode").to_pylist()) == sorted(keys)
    assert calls.num_rows == len(keys)
