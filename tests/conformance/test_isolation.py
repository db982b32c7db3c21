"""Escape attempts that must fail: host files, host network, other sandboxes."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PROBE = (
    'python3 -c "import socket,sys; s=socket.socket(); s.settimeout(3); '
    "s.connect(('127.0.0.1', int(sys.argv[1]))); print(s.recv(100).decode())\" {port}"
)


@contextmanager
def tcp_server(greeting: bytes) -> Iterator[int]:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(greeting)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


def test_host_private_files_are_not_visible(sandbox, runtime_name, image):
    marker = f"/tmp/pomona-marker-{uuid.uuid4().hex}"
    open(marker, "w").write("host")
    try:
        assert sandbox.exec(f"cat {marker}").exit_code != 0
        assert sandbox.exec("cat /etc/shadow", user="root").exit_code != 0 or image != "host"
        assert sandbox.exec("ls /root", user="root").stdout.strip() == ""
    finally:
        import os

        os.unlink(marker)


def test_none_mode_cannot_reach_host_loopback(client, image):
    with tcp_server(b"host-server") as port, client.create_sandbox(image, network="none") as sb:
        r = sb.exec(PROBE.format(port=port), timeout=20)
        assert r.exit_code != 0 and "host-server" not in r.stdout


def test_gateway_mode_reaches_only_the_allowed_port(client, image):
    with (
        tcp_server(b"allowed") as allowed,
        tcp_server(b"forbidden") as other,
        client.create_sandbox(image, network="gateway", gateway=f"127.0.0.1:{allowed}") as sb,
    ):
        ok = sb.exec(PROBE.format(port=allowed), timeout=20)
        assert ok.exit_code == 0 and ok.stdout.strip() == "allowed"
        blocked = sb.exec(PROBE.format(port=other), timeout=20)
        assert blocked.exit_code != 0 and "forbidden" not in blocked.stdout


def test_full_mode_reaches_the_host(client, image):
    with tcp_server(b"reachable") as port, client.create_sandbox(image, network="full") as sb:
        host = "127.0.0.1"
        if sb.info.runtime == "docker":
            pytest.skip("a bridged container reaches the host by its bridge address, not loopback")
        r = sb.exec(PROBE.format(port=port).replace("127.0.0.1", host), timeout=20)
        assert r.stdout.strip() == "reachable"


def test_sandboxes_do_not_see_each_other(client, image):
    with client.create_sandbox(image) as a, client.create_sandbox(image) as b:
        a.exec("sleep 300 > /dev/null 2>&1 &")
        a.write_file("/tmp/a-only", "secret of a")
        assert "sleep 300" not in b.exec("ps -eo args").stdout
        assert b.exec("cat /tmp/a-only").exit_code != 0
        b.exec("kill -9 -1", user="root")  # everything b can see, as b's root
        assert a.exec("ps -eo args").stdout.count("sleep 300") == 1  # b could not kill a's process


def test_connect_to_a_server_inside(sandbox):
    sandbox.write_file(
        "/workspace/srv.py",
        (
            "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', 8765)); s.listen(1); c, _ = s.accept(); c.sendall(b'echo:' + c.recv(100))\n"
        ),
    )
    sandbox.exec("python3 /workspace/srv.py > /dev/null 2>&1 &")
    for _ in range(50):
        if (
            "8765"
            in sandbox.exec(
                "cat /proc/net/tcp | awk '{print $2}' | grep -i :223D || true"
            ).stdout.upper()
            or sandbox.exec("grep -qi ':223D' /proc/net/tcp").exit_code == 0
        ):
            break
    with sandbox.connect(8765) as conn:
        conn.sendall(b"ping")
        assert conn.recv(100) == b"echo:ping"


def test_gateway_keeps_a_half_closed_connection_open(client, image):
    """A client that shuts down its sending side (nc with stdin at EOF, HTTP/1.0 style) must
    still get the whole answer through the gateway."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        request = b""
        while chunk := conn.recv(100):  # read to the client's EOF, then answer
            request += chunk
        conn.sendall(b"got:" + request)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    probe = (
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), 5); "
        "s.sendall(b'ping'); s.shutdown(socket.SHUT_WR); print(s.recv(100).decode())\""
    )
    try:
        with client.create_sandbox(image, network="gateway", gateway=f"127.0.0.1:{port}") as sb:
            assert sb.exec(probe.format(port=port), timeout=20).stdout.strip() == "got:ping"
    finally:
        thread.join(5)
        server.close()
