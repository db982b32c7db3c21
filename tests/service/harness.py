"""Running the real service for tests: in a thread (uvicorn, same process), as a replica
subprocess (so it can be SIGKILLed), and a real redis-server on a free port."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn

KEYS = {
    "alice": "alice-key-0123456789",
    "bob": "bob-key-0123456789",
    "admin": "admin-key-0123456789",
}
KEYS_ENV = ",".join(f"{n}:{k}" for n, k in KEYS.items())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen | None = None, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the service exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become healthy within {limit} s")


@contextlib.contextmanager
def server_thread(app) -> Iterator[str]:
    """uvicorn serving `app` on a free port in a daemon thread; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ws="websockets-sansio",
            timeout_keep_alive=120,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        thread.join(30)


REPLICA = textwrap.dedent("""
    import logging, sys
    from pomona.orchestrator.server.timing import Timing
    from pomona.orchestrator.server.app import serve
    logging.basicConfig(level=logging.WARNING)
    port, state, redis = int(sys.argv[1]), sys.argv[2], sys.argv[3] or None
    timing = Timing(maintenance_interval=0.2, replica_ttl=1.5, lock_ttl=3.0)
    serve("127.0.0.1", port, "local", state, redis, timing=timing, **eval(sys.argv[4]))
""")


class Replica:
    """One `pomona serve` process over the local runtime; kill() is SIGKILL, restart() comes back
    on the same port and state."""

    def __init__(
        self,
        state_dir: Path,
        redis_url: str | None = None,
        port: int | None = None,
        **options: object,
    ):
        self.state_dir, self.redis_url = state_dir, redis_url
        self.port = port or free_port()
        self.options = options
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> Replica:
        env = {**os.environ, "POMONA_API_KEYS": KEYS_ENV}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                REPLICA,
                str(self.port),
                str(self.state_dir),
                self.redis_url or "",
                repr(self.options),
            ],
            env=env,
            start_new_session=True,
        )
        wait_healthy(self.url, self.process)
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> Replica:
        self.kill()
        return self.start()


class RedisServer:
    """A real redis-server (Debian's) on a free port, with an append-only file so it can restart
    with its data."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pomona-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def unmount(state_dir: Path) -> None:
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(state_dir).unmount_store()
