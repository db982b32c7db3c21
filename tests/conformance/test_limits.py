"""Limits hold, and neither the sandbox nor the test process suffers when one is hit."""

from __future__ import annotations

import os
import time

import pytest

from pomona.errors import InvalidRequest

MEMORY_HOG = "python3 -c 'b = []\nwhile True: b.append(bytearray(16 * 2**20))'"


def test_memory_hog_is_killed(client, image):
    with client.create_sandbox(image, memory="128Mi") as sb:
        r = sb.exec(MEMORY_HOG, timeout=60)
        assert r.exit_code != 0 and not r.timed_out
        assert r.exit_code in (-9, 137) or "MemoryError" in r.stderr
        assert sb.exec("echo alive").stdout == "alive\n"


def test_fork_bomb_stops_at_the_pids_limit(client, image):
    with client.create_sandbox(image, pids=40) as sb:
        r = sb.exec("for i in $(seq 1 200); do sleep 30 & done; wait", timeout=20)
        assert (
            r.exit_code != 0
            or r.timed_out
            or "fork" in r.stderr.lower()
            or "resource" in r.stderr.lower()
        )
        # the sandbox recovers once the bomb's processes are gone (killed at the timeout, then
        # reaped; on a loaded host an exec can meet the slots still full and fail to start)
        deadline = time.monotonic() + 60
        while (count := sb.exec("ps -e --no-headers | wc -l", timeout=20)).exit_code != 0:
            assert time.monotonic() < deadline, f"the sandbox did not recover: {count}"
            time.sleep(1)
        assert int(count.stdout) <= 40
    assert os.fork  # the test process can still fork
    assert os.system("true") == 0


def test_disk_filler_hits_its_quota(client, image):
    try:
        sb = client.create_sandbox(image, disk="64Mi")
    except InvalidRequest as e:
        # an engine whose storage driver cannot cap a container's disk says so instead of ignoring it
        assert "storage" in str(e).lower()
        pytest.skip(f"this engine cannot limit disk size: {e}")
    with sb:
        r = sb.exec("dd if=/dev/zero of=/workspace/big bs=1M count=200", timeout=60)
        assert r.exit_code != 0 and "space" in r.stderr.lower()
        sb.exec("rm -f /workspace/big")
        assert sb.exec("echo ok > /workspace/small && cat /workspace/small").stdout == "ok\n"


CPU_BURN = (
    "python3 -c 'import os, time\nt = time.time()\nwhile time.time() - t < 2: pass\n"
    "c = os.times(); print(c.user + c.system)'"
)


def test_cpu_limit_caps_cpu_time(client, image):
    """Half a core for 2 s of busy loop allows at most ~1 s of CPU. Load elsewhere can only lower
    what the loop gets, so the bound never flakes; without the limit an idle core gives ~2 s."""
    try:
        sb = client.create_sandbox(image, cpu=0.5)
    except InvalidRequest as e:  # an ordinary user's runtime with no cgroup delegated says so
        assert "cpu" in str(e).lower()
        pytest.skip(f"this runtime cannot limit CPU here: {e}")
    with sb:
        r = sb.exec(CPU_BURN, timeout=60)
        assert r.exit_code == 0, r.stderr
        assert float(r.stdout) < 1.4
