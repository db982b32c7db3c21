"""A tenant (a non-admin API key) against the host: host paths, image sources, and the
orchestrator's own network position."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def _mount(source: str, target: str = "/mnt/in") -> dict:
    return {"image": "host", "mounts": [{"source": source, "target": target}]}


def test_a_tenant_cannot_mount_a_host_path(tenant):
    alice = tenant("alice")
    for source in ("/etc", "/", "/nonexistent-path-91"):
        r = alice.post("/sandboxes", json=_mount(source))
        assert r.status_code == 403, r.text
        assert r.json()["error"] == "SourceNotAllowed"
    details = {
        alice.post("/sandboxes", json=_mount(s)).json()["detail"].split(":", 1)[1]
        for s in ("/etc", "/nonexistent-path-91")
    }
    assert len(details) == 1  # the answer never says whether the path exists
    assert alice.get("/sandboxes").json() == []  # nothing half-created


def test_a_tenant_mounts_only_what_the_operator_allowed(
    tenant, allowed_mounts: Path, payload_dir: Path
):
    alice, admin = tenant("alice"), tenant("admin")
    escape = allowed_mounts / "escape"
    escape.symlink_to("/etc")  # inside the allowed directory, pointing out of it
    assert alice.post("/sandboxes", json=_mount(str(escape))).status_code == 403
    assert alice.post("/sandboxes", json=_mount(f"{allowed_mounts}/../../etc")).status_code == 422
    for who, body, expected in (
        (alice, _mount(str(allowed_mounts)), "data.txt"),
        (alice, _mount("tools", "/opt/pomona/tools"), "payload.txt"),
        (admin, _mount("/etc"), "passwd"),
    ):
        r = who.post("/sandboxes", json=body)
        assert r.status_code == 200, r.text
        sandbox = r.json()["id"]
        target = body["mounts"][0]["target"]
        listing = who.post(
            f"/sandboxes/{sandbox}/exec", json={"command": f"ls {target}", "wait": True}
        )
        assert expected in listing.json()["stdout"].split()
        assert who.delete(f"/sandboxes/{sandbox}").status_code == 200
    assert (payload_dir / "payload.txt").exists()


@pytest.mark.parametrize(
    "reference",
    [
        "oci-archive:/dev/zero",  # unfixed: a thread reads zeros forever
        "oci-archive:/proc/self/environ",  # the service's own environment, keys included
        "docker-archive:/etc/passwd",
        "/etc/shadow.tar",
        "oci-archive:/nonexistent/image.tar",
    ],
)
def test_image_archives_come_only_from_allowed_directories(tenant, reference):
    r = tenant("alice").post("/sandboxes", json={"image": reference})
    assert r.status_code == 403, r.text
    assert "--image-dir" in r.json()["detail"]
    assert "POMONA_API_KEYS" not in r.text and "key-0123456789" not in r.text


def test_an_image_reference_cannot_make_the_orchestrator_connect_anywhere(tenant):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        for reference in (f"127.0.0.1:{port}/library/x:1", f"localhost:{port}/x@sha256:{'0' * 64}"):
            r = tenant("alice").post("/sandboxes", json={"image": reference})
            assert r.status_code == 403, r.text
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected


def test_another_tenants_sandbox_is_not_there(tenant):
    alice, bob = tenant("alice"), tenant("bob")
    assert (
        alice.post("/sandboxes", json={"image": "host", "sandbox_id": "alice-only"}).status_code
        == 200
    )
    try:
        for method, path in (
            ("GET", "/sandboxes/alice-only"),
            ("GET", "/sandboxes/alice-only/files/list"),
            ("POST", "/sandboxes/alice-only/heartbeat"),
        ):
            assert bob.request(method, path).status_code == 404
        assert bob.post("/sandboxes/alice-only/exec", json={"command": "true"}).status_code == 404
        assert (
            bob.post("/sandboxes", json={"image": "host", "sandbox_id": "alice-only"}).status_code
            == 409
        )
        assert bob.delete("/sandboxes/alice-only").json()["existed"] is False
    finally:
        alice.delete("/sandboxes/alice-only")


@pytest.mark.parametrize("how", ["redirect", "token realm"])
def test_an_allowed_registry_cannot_redirect_the_pull_elsewhere(tmp_path, how):
    """A registry on the allow-list answers with a redirect (or a token realm) to another host:
    the orchestrator must not follow it there."""
    import asyncio
    import http.server
    import threading

    from pomona.errors import ImageNotFound
    from pomona.orchestrator.linux.images import ImageStore
    from pomona.orchestrator.sources import ImageSources

    with socket.socket() as elsewhere:
        elsewhere.bind(("127.0.0.1", 0))
        elsewhere.listen(8)
        elsewhere.setblocking(False)
        target = f"127.0.0.1:{elsewhere.getsockname()[1]}"

        class Redirecting(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if how == "token realm":
                    self.send_response(401)
                    self.send_header(
                        "WWW-Authenticate", f'Bearer realm="http://{target}/token",service="r"'
                    )
                else:
                    self.send_response(302)
                    self.send_header("Location", f"http://{target}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        registry = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
        threading.Thread(target=registry.serve_forever, daemon=True).start()
        try:
            allowed = f"127.0.0.1:{registry.server_address[1]}"
            store = ImageStore(tmp_path, sources=ImageSources.restricted(registries=[allowed]))
            with pytest.raises(ImageNotFound):
                asyncio.run(store.resolve(f"{allowed}/x:1"))
        finally:
            registry.shutdown()
            registry.server_close()
        with pytest.raises(BlockingIOError):
            elsewhere.accept()  # nobody came
