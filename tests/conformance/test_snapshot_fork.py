"""Snapshot and fork: branches diverge, snapshots outlive their source."""

from __future__ import annotations

import pytest

from pomona.errors import SandboxConflict, SnapshotNotFound


def test_fork_branches_diverge_without_seeing_each_other(client, sandbox):
    sandbox.write_file("state.txt", "base")
    snap = sandbox.snapshot()
    left, right = client.fork(snap, 2)
    try:
        left.exec("echo left > state.txt; echo only-left > left.txt")
        right.exec("echo right > state.txt")
        assert left.read_file("state.txt") == b"left\n"
        assert right.read_file("state.txt") == b"right\n"
        assert sandbox.read_file("state.txt") == b"base"
        assert right.exec("test -e left.txt").exit_code == 1
        sandbox.write_file("later.txt", "after the snapshot")
        assert left.exec("test -e later.txt").exit_code == 1
    finally:
        left.delete()
        right.delete()
        client.delete_snapshot(snap)


def test_snapshot_restored_after_original_deleted(client, image):
    original = client.create_sandbox(image)
    original.exec("mkdir -p data && seq 1 1000 > data/numbers && rm -f /tmp/x")
    snap = original.snapshot()
    original.delete()
    (restored,) = client.fork(snap, 1)
    try:
        assert restored.exec("wc -l < data/numbers").stdout.strip() == "1000"
        with pytest.raises(SandboxConflict):
            client.delete_snapshot(snap)  # in use by `restored`
    finally:
        restored.delete()
    assert client.delete_snapshot(snap) is True
    assert client.delete_snapshot(snap) is False
    with pytest.raises(SnapshotNotFound):
        client.fork(snap, 1)


def test_fork_of_a_fork(client, sandbox):
    sandbox.write_file("gen", "0")
    s0 = sandbox.snapshot()
    (child,) = client.fork(s0, 1)
    child.write_file("gen", "1")
    s1 = child.snapshot()
    (grandchild,) = client.fork(s1, 1)
    try:
        assert grandchild.read_file("gen") == b"1"
    finally:
        grandchild.delete()
        child.delete()
        client.delete_snapshot(s1)
        client.delete_snapshot(s0)
