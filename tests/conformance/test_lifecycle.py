"""Create, find, list by label, and delete: idempotent where a retry must be safe."""

from __future__ import annotations

import os
import resource

import pytest

from pomona.errors import InvalidRequest, SandboxConflict, SandboxNotFound


def test_create_exec_delete(client, image):
    sb = client.create_sandbox(image, timeout=60)
    assert sb.info.status == "ready"
    assert sb.exec("echo hi").stdout == "hi\n"
    assert sb.delete() is True
    assert sb.delete() is False  # idempotent
    with pytest.raises(SandboxNotFound):
        sb.exec("true")


def test_a_process_holding_over_1024_descriptors_creates_and_deletes(client, image):
    """A service with a thousand sandboxes holds descriptors above 1024, where select() fails
    (its delete raised 'filedescriptor out of range in select()' in the 1,000-sandbox run)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip(f"the descriptor limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) > 1024
        sb = client.create_sandbox(image, timeout=60)
        assert sb.exec("echo hi").stdout == "hi\n"
        assert sb.delete() is True
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_create_is_idempotent_on_client_chosen_id(client, image):
    first = client.create_sandbox(image, sandbox_id="same-id-1", labels={"a": "1"})
    try:
        first.write_file("marker", "kept")
        again = client.create_sandbox(image, sandbox_id="same-id-1", labels={"a": "1"})
        assert again.id == first.id
        assert again.read_file("marker") == b"kept"  # the same sandbox, not a new one
        with pytest.raises(SandboxConflict, match="different spec"):
            client.create_sandbox(image, sandbox_id="same-id-1", labels={"a": "2"})
    finally:
        first.delete()


def test_list_by_label(client, image):
    a = client.create_sandbox(image, labels={"run": "r1", "task": "t1"})
    b = client.create_sandbox(image, labels={"run": "r1", "task": "t2"})
    try:
        assert {s.id for s in client.list_sandboxes({"run": "r1"})} == {a.id, b.id}
        assert [s.id for s in client.list_sandboxes({"run": "r1", "task": "t2"})] == [b.id]
        assert client.list_sandboxes({"run": "nope"}) == []
    finally:
        a.delete()
        b.delete()


def test_unknown_sandbox_is_a_clear_error(client):
    with pytest.raises(SandboxNotFound, match="no sandbox with id 'missing-one'"):
        client.get_sandbox("missing-one")
    assert client.delete_sandbox("missing-one") is False


@pytest.mark.parametrize("bad", ["UPPER", "../x", "", "a" * 80, "a/b"])
def test_bad_ids_are_rejected(client, image, bad):
    with pytest.raises(InvalidRequest):
        client.create_sandbox(image, sandbox_id=bad or "-")


def test_bad_spec_is_rejected(client, image):
    with pytest.raises(InvalidRequest, match="gateway"):
        client.create_sandbox(image, network="gateway")
    with pytest.raises((InvalidRequest, ValueError)):
        client.create_sandbox(image, memory="lots")


def test_ttl_expires_and_heartbeat_extends(client, image):
    """Times are read from the sandboxes' own expiry, not assumed: on a loaded machine a create
    can take longer than a fixed sleep's margin."""
    import time

    def until(moment: float) -> None:
        time.sleep(max(0.0, moment - time.time()))

    sb = client.create_sandbox(image, timeout=6)
    keep = client.create_sandbox(image, timeout=6)  # expires no sooner than sb
    try:
        until(sb.info.expires_at - 3)  # keep has 3 s or more left
        before = keep.info.expires_at
        assert keep.heartbeat().expires_at > before  # now at least 3 s past sb's expiry
        until(sb.info.expires_at + 0.5)
        client.reap()  # the background reaper may have got there first: check the effect
        alive = {s.id for s in client.list_sandboxes()}
        assert sb.id not in alive and keep.id in alive
        with pytest.raises(SandboxNotFound):
            sb.exec("true")
        assert keep.exec("true").exit_code == 0
    finally:
        sb.delete()
        keep.delete()
