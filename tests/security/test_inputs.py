"""Hostile input over REST: every malformed or hostile value is a clear 4xx, and nothing is
half-created. A fixed list of known cases, then hostile strings (lone surrogates, NUL, control
characters, `..`, very long) fuzzed into exec, files and create."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TARGET = "inputs-target"


@pytest.fixture(scope="module")
def target(service_url):
    import httpx

    from tests.service.harness import KEYS

    with httpx.Client(
        base_url=service_url, headers={"X-API-Key": KEYS["alice"]}, timeout=120
    ) as alice:
        assert (
            alice.post("/sandboxes", json={"image": "host", "sandbox_id": TARGET}).status_code
            == 200
        )
        yield TARGET
        alice.delete(f"/sandboxes/{TARGET}")


def _raw(client, method: str, path: str, text: str, **kwargs):
    return client.request(
        method, path, content=text.encode(), headers={"content-type": "application/json"}, **kwargs
    )


def _hardlink_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member = tarfile.TarInfo("shadow")
        member.type, member.linkname = tarfile.LNKTYPE, "/etc/shadow"
        tar.addfile(member)
    return buf.getvalue()


CASES = [
    ("POST", "/sandboxes", '{"image": "host", "labels": {"run": "\\ud800"}}'),
    ("POST", "/sandboxes", '{"image": "host", "env": {"A": "\\udfff"}}'),
    ("POST", "/sandboxes", '{"image": "host", "workdir": "/w\\udc80"}'),
    ("POST", "/sandboxes", '{"image": "ho\\ud800st"}'),
    ("POST", "/sandboxes", '{"image": "host", "network": "gateway", "gateway": "127.0.0.1:99999"}'),
    ("POST", "/sandboxes", '{"image": "host", "network": "gateway", "gateway": "127.0.0.1:0"}'),
    ("POST", "/sandboxes", '{"image": "host", "memory": "900Ti"}'),
    ("POST", "/sandboxes", '{"image": "host", "cpu": 4000}'),
    ("POST", "/sandboxes", '{"image": "host", "limits": {"pids": 4000000}}'),
    ("POST", "/sandboxes", '{"image": "host", "limits": {"disk": 1152921504606846977}}'),
    ("POST", "/sandboxes", '{"image": "host", "limits": {"disk": "999Ti"}}'),
    ("POST", "/sandboxes", '{"image": "\\u0000"}'),
    ("POST", f"/sandboxes/{TARGET}/exec", '{"command": "echo \\ud800", "wait": true}'),
    ("POST", f"/sandboxes/{TARGET}/exec", '{"command": ["echo", "\\udc00"], "wait": true}'),
    ("POST", f"/sandboxes/{TARGET}/exec", '{"command": "true", "cwd": "/\\ud800", "wait": true}'),
    ("POST", f"/sandboxes/{TARGET}/exec", '{"command": "true", "stdin": "\\udbff", "wait": true}'),
    ("POST", f"/sandboxes/{TARGET}/files", '{"path": "/tmp/\\udc80", "content": "eA=="}'),
    ("POST", f"/sandboxes/{TARGET}/apply_patch", '{"patch": "\\ud800"}'),
    ("POST", f"/sandboxes/{TARGET}/snapshot", '{"snapshot_id": "\\ud800"}'),
]


@pytest.mark.parametrize(("method", "path", "body"), CASES, ids=[c[2][:40] for c in CASES])
def test_hostile_values_are_a_clear_4xx(tenant, target, method, path, body):
    alice = tenant("alice")
    r = _raw(alice, method, path, body)
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"] in ("InvalidRequest", "SourceNotAllowed"), r.text
    assert [s["id"] for s in alice.get("/sandboxes").json()] == [TARGET]  # nothing half-created


def test_a_hard_link_to_a_name_outside_the_archive_is_refused(tenant, target):
    r = tenant("alice").put(
        f"/sandboxes/{target}/archive", params={"path": "/workspace"}, content=_hardlink_tar()
    )
    assert r.status_code == 422 and "hard link" in r.json()["detail"]


def test_an_out_of_range_port_is_refused(remote_client):
    from pomona.errors import InvalidRequest

    with remote_client.create_sandbox("host") as sb:
        for port in (0, 65536, 99999):
            with pytest.raises(InvalidRequest, match="out of range"):
                sb.connect(port)


HOSTILE = st.one_of(
    st.text(st.characters(codec=None, categories=None), max_size=40),  # surrogates, controls, NUL
    st.sampled_from(
        [
            "..",
            "../../etc/shadow",
            "/proc/self/environ",
            "\x00",
            "/dev/zero",
            "~root",
            "a" * 5000,
            "/" * 300,
            "\ud800",
            "$(id)",
            "`id`",
            "%00",
            "\\",
            "\n",
        ]
    ),
)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    value=HOSTILE,
    where=st.sampled_from(
        [
            "exec",
            "cwd",
            "env",
            "read",
            "stat",
            "write",
            "list",
            "remove",
            "label",
            "create-label",
            "create-image",
        ]
    ),
)
def test_hostile_strings_never_make_the_service_fail(tenant, target, value, where):
    alice = tenant("alice")
    requests = {
        "exec": (
            "POST",
            f"/sandboxes/{target}/exec",
            {"json": {"command": value, "wait": True, "timeout": 30}},
        ),
        "cwd": (
            "POST",
            f"/sandboxes/{target}/exec",
            {"json": {"command": "true", "cwd": value, "wait": True}},
        ),
        "env": (
            "POST",
            f"/sandboxes/{target}/exec",
            {"json": {"command": "true", "env": {value: value}, "wait": True}},
        ),
        "read": ("GET", f"/sandboxes/{target}/files", {"params": {"path": value}}),
        "stat": ("GET", f"/sandboxes/{target}/files/stat", {"params": {"path": value}}),
        "write": (
            "POST",
            f"/sandboxes/{target}/files",
            {"json": {"path": value, "content": "eA=="}},
        ),
        "list": ("GET", f"/sandboxes/{target}/files/list", {"params": {"path": value}}),
        "remove": ("DELETE", f"/sandboxes/{target}/files", {"params": {"path": value}}),
        "label": ("GET", "/sandboxes", {"params": {"label": f"{value}={value}"}}),
        "create-label": (
            "POST",
            "/sandboxes",
            {"json": {"image": "host", "labels": {"k": value}, "sandbox_id": TARGET}},
        ),
        "create-image": ("POST", "/sandboxes", {"json": {"image": value}}),
    }
    method, path, kwargs = requests[where]
    if (
        "json" in kwargs
    ):  # ensure_ascii keeps lone surrogates as \\u escapes, as a hostile client would
        r = _raw(alice, method, path, json.dumps(kwargs["json"]))
    else:
        try:
            r = alice.request(method, path, **kwargs)
        except UnicodeEncodeError:
            return  # the client cannot even put it in a URL
    assert r.status_code < 500 or r.status_code == 503, (
        f"{where}={value!r}: {r.status_code} {r.text[:300]}"
    )
    if where == "create-image" and r.status_code == 200:
        alice.delete(f"/sandboxes/{r.json()['id']}")


@pytest.mark.parametrize("where", ["read", "stat", "write", "list", "remove"])
def test_a_name_too_long_for_the_filesystem_is_the_callers_error(tenant, target, where):
    """ENAMETOOLONG from a system call of the files API is a 422 in words, not a 500 (found by the
    fuzzing above: the system-call error answered as an internal one)."""
    alice, name = tenant("alice"), "/workspace/" + "a" * 300
    method, path, kwargs = {
        "read": ("GET", "/files", {"params": {"path": name}}),
        "stat": ("GET", "/files/stat", {"params": {"path": name}}),
        "write": ("POST", "/files", {"json": {"path": name, "content": "eA=="}}),
        "list": ("GET", "/files/list", {"params": {"path": name}}),
        "remove": ("DELETE", "/files", {"params": {"path": name}}),
    }[where]
    r = alice.request(method, f"/sandboxes/{target}{path}", **kwargs)
    assert r.status_code == 422, f"{r.status_code} {r.text[:300]}"
    assert "ENAMETOOLONG" in r.json()["detail"]
