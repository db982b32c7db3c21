"""`pomona serve --workers N`: several processes on one port, state dir and store, as the real
command runs them: requests land on every worker and a sandbox made through one works through
the others; a killed worker is replaced; a stop leaves nothing; bad set-ups say why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pomona.orchestrator.runtimes.local import LocalRuntime
from tests.conftest import leftovers
from tests.service.conftest import poll
from tests.service.harness import KEYS, KEYS_ENV, free_port, wait_healthy

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the local runtime's service runs as root"
)
POMONA = str(Path(sys.executable).with_name("pomona"))


def serve(state: Path, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [POMONA, "serve", "--port", str(port), "--state-dir", str(state), *extra],
        env={**os.environ, "POMONA_API_KEYS": KEYS_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def workers_of(supervisor: subprocess.Popen) -> list[int]:
    children = Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read_text()
    return [int(pid) for pid in children.split()]


def creates_counted(url: str, tries: int = 10) -> set[float]:
    """The creates that answered 2xx, as /metrics reports them on fresh connections."""
    seen = set()
    for _ in range(tries):
        r = httpx.get(url + "/metrics", headers={"X-API-Key": KEYS["admin"]}, timeout=10)
        assert r.status_code == 200, r.text
        seen.add(
            sum(
                sample.value
                for family in text_string_to_metric_families(r.text)
                for sample in family.samples
                if sample.name == "pomona_service_operation_seconds_count"
                and sample.labels == {"operation": "create", "status": "2xx"}
            )
        )
    return seen


def replicas(url: str, tries: int = 40) -> set[str]:
    """The replica ids that answer fresh connections (each request opens its own)."""
    return {httpx.get(url + "/", timeout=10).json()["replica"] for _ in range(tries)}


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    state, port = tmp_path / "state", free_port()
    supervisor = serve(state, port, "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, supervisor)
        poll(lambda: len(replicas(url)) == 2, "both workers answering")
        yield url, supervisor, state
    finally:
        if supervisor.poll() is None:
            supervisor.terminate()
            supervisor.wait(60)
        LocalRuntime(state).unmount_store()


def test_every_worker_serves_the_sandboxes_any_other_made(two_workers) -> None:
    url, supervisor, state = two_workers
    headers = {"X-API-Key": KEYS["alice"]}
    made = []
    for _ in range(6):  # a new connection per request: the kernel spreads them over the workers
        r = httpx.post(url + "/sandboxes", json={"image": "host"}, headers=headers, timeout=60)
        assert r.status_code in (200, 201), r.text
        made.append(r.json()["id"])
    assert creates_counted(url) == {6}  # the service's count, whichever worker is scraped
    for sandbox_id in made:
        for n in range(3):
            r = httpx.post(
                f"{url}/sandboxes/{sandbox_id}/exec",
                json={"command": f"echo {n} > /tmp/n; cat /tmp/n", "wait": True},
                headers=headers,
                timeout=60,
            )
            assert r.status_code == 200, r.text
            assert r.json()["stdout"] == f"{n}\n"
    listed = httpx.get(url + "/sandboxes", headers=headers, timeout=30).json()
    assert {s["id"] for s in listed} >= set(made)
    for sandbox_id in made:
        assert httpx.delete(f"{url}/sandboxes/{sandbox_id}", headers=headers, timeout=60).is_success
        r = httpx.get(f"{url}/sandboxes/{sandbox_id}", headers=headers, timeout=30)
        assert r.status_code == 404, r.text  # gone for every worker, not only the deleting one

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.stdout.read() if supervisor.stdout else ""
    LocalRuntime(state).unmount_store()
    assert leftovers([str(state)]) == []


def test_a_killed_worker_is_replaced_and_the_service_answers_throughout(two_workers) -> None:
    url, supervisor, _ = two_workers
    headers = {"X-API-Key": KEYS["alice"]}
    sandbox = httpx.post(url + "/sandboxes", json={"image": "host"}, headers=headers, timeout=60)
    sandbox_id = sandbox.json()["id"]
    for victim in workers_of(supervisor):  # both, one by one: the sandbox's maker among them
        before = replicas(url)
        os.kill(victim, signal.SIGKILL)
        poll(
            lambda victim=victim: victim not in (now := workers_of(supervisor)) and len(now) == 2,
            "the supervisor forking a new worker",
        )
        poll(
            lambda before=before: len(after := replicas(url)) == 2 and after != before,
            "the new one answering",
        )
    r = httpx.post(
        f"{url}/sandboxes/{sandbox_id}/exec",
        json={"command": "echo still here", "wait": True},
        headers=headers,
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["stdout"] == "still here\n", r.text
    assert creates_counted(url) == {1}  # the killed workers' counts are kept
    assert httpx.delete(f"{url}/sandboxes/{sandbox_id}", headers=headers, timeout=60).is_success


def pinned_to_two_replicas(url: str) -> tuple[httpx.Client, httpx.Client]:
    """Two clients whose kept-alive connections reach different workers."""
    by_replica: dict[str, httpx.Client] = {}
    for _ in range(40):
        client = httpx.Client(base_url=url, headers={"X-API-Key": KEYS["alice"]}, timeout=60)
        replica = client.get("/").json()["replica"]
        if replica in by_replica:
            client.close()
        else:
            by_replica[replica] = client
        if len(by_replica) == 2:
            first, second = by_replica.values()
            return first, second
    raise AssertionError("40 connections all reached one worker")


def test_a_snapshot_whose_forks_another_worker_deleted_can_be_deleted(two_workers) -> None:
    url = two_workers[0]
    maker, other = pinned_to_two_replicas(url)
    try:
        sandbox_id = maker.post("/sandboxes", json={"image": "host"}).json()["id"]
        maker.post(f"/sandboxes/{sandbox_id}/snapshot", json={"snapshot_id": "snap-w"})
        forks = maker.post("/snapshots/snap-w/fork", json={"k": 2}).json()
        assert other.delete("/snapshots/snap-w").status_code == 409  # the maker's forks count
        for fork in forks:
            assert other.delete(f"/sandboxes/{fork['id']}").is_success
        deleted = maker.delete("/snapshots/snap-w")  # its own view still held the forks
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True, deleted.text
        assert maker.delete(f"/sandboxes/{sandbox_id}").is_success
    finally:
        maker.close()
        other.close()


def test_a_port_in_use_is_refused_as_with_one_worker(tmp_path: Path) -> None:
    port = free_port()
    holder = serve(tmp_path / "a", port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", holder)
        second = serve(tmp_path / "b", port, "--workers", "2")
        out, _ = second.communicate(timeout=60)
        assert second.returncode != 0
        assert f"cannot listen on 127.0.0.1:{port}" in out and "in use" in out
    finally:
        holder.terminate()
        holder.wait(60)
        LocalRuntime(tmp_path / "a").unmount_store()


def test_workers_need_a_runtime_that_shares_its_state(tmp_path: Path) -> None:
    done = subprocess.run(
        [POMONA, "serve", "--runtime", "docker", "--workers", "2", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "the docker runtime cannot share its sandboxes" in done.stderr


def test_workers_that_cannot_start_stop_the_service_instead_of_restarting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    start = time.monotonic()
    supervisor = serve(blocker / "state", free_port(), "--workers", "2")
    out, _ = supervisor.communicate(timeout=120)
    assert supervisor.returncode != 0
    assert "before it served: stopping the service" in out, out
    assert time.monotonic() - start < 60
