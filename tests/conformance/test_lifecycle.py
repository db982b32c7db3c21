"""Create, find, list by label, and delete: idempotent where a retry must be safe."""

from __future__ import annotations

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
    sb = client.create_sandbox(image, timeout=2)
    keep = client.create_sandbox(image, timeout=2)
    try:
        before = keep.info.expires_at
        import time

        time.sleep(1.2)
        assert keep.heartbeat().expires_at > before
        time.sleep(1.2)
        client.reap()  # the background reaper may have got there first: check the effect
        alive = {s.id for s in client.list_sandboxes()}
        assert sb.id not in alive and keep.id in alive
        with pytest.raises(SandboxNotFound):
            sb.exec("true")
        assert keep.exec("true").exit_code == 0
    finally:
        sb.delete()
        keep.delete()
