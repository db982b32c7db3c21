"""`pomona serve --workers N`: N service processes on one port, one state dir and one store.

One Python process answers a request in about 2 ms of CPU on its one event loop, so a single
process is bound to one core long before the sandboxes are. Each worker here is an ordinary
replica (its own coordinator, replica id and runtime view over the shared state dir, the leases
and locks of the store keeping them apart, exactly as replicas on several hosts), so nothing
about the service's rules changes with N.

The supervisor binds N listening sockets to the port with SO_REUSEPORT (the kernel spreads new
connections over them) and keeps them: a worker that dies is forked again onto its own socket,
so the connections queued there wait for it instead of being reset; one that dies before it
said it was serving (a bad state dir, a runtime that is missing) stops the whole service with
its exit code instead of being forked again and again. It forks before any thread or event
loop exists; a worker exits when the supervisor does (PR_SET_PDEATHSIG). SIGTERM or SIGINT
stops every worker gracefully, then the supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

log = logging.getLogger("pomona.service")
STOP_GRACE = 30.0  # how long a stopping worker may take before it is killed
_PR_SET_PDEATHSIG = 1


def listening_sockets(host: str, port: int, count: int, backlog: int) -> list[socket.socket]:
    """`count` sockets on one address; port 0 picks a free port, the same for all. A port
    another process listens on is refused (EADDRINUSE), as with one worker: SO_REUSEPORT alone
    would let these join another service's port of the same user."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if port:
        with socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            # IPPROTO_TCP named, not 0: asyncio turns Nagle off only on sockets that say TCP,
            # and with it on, a response's body waits 40 ms for the client's delayed ACK
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Supervisor:
    """Forks one worker per socket, restarts the ones that die, stops them all on a signal."""

    def __init__(
        self,
        sockets: list[socket.socket],
        run_worker: Callable[[socket.socket, Callable[[], object]], None],
    ):
        """`run_worker(sock, ready)` serves on sock until stopped, calling ready() once it is
        serving."""
        self.sockets, self.run_worker = sockets, run_worker
        self.pids: dict[int, tuple[int, int]] = {}  # pid -> (socket index, its ready pipe)
        self.stopping = False

    def _fork(self, index: int) -> None:
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                os.close(ready_r)
                ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
                if os.getppid() == 1:  # the supervisor died before the line above
                    os._exit(0)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                for i, sock in enumerate(self.sockets):
                    if i != index:
                        sock.close()
                self.run_worker(self.sockets[index], lambda: os.write(ready_w, b"1"))
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                os._exit(code)
        os.close(ready_w)
        os.set_blocking(ready_r, False)
        self.pids[pid] = (index, ready_r)

    def _stop(self, signum: int, _frame: object) -> None:
        if not self.stopping:
            log.info("stopping %d workers (signal %d)", len(self.pids), signum)
        self.stopping = True
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def run(self) -> int:
        """Until a signal stops the service (0) or a worker cannot start (its exit code)."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for index in range(len(self.sockets)):
            self._fork(index)
        code, deadline = 0, float("inf")
        while self.pids:
            if self.stopping and deadline == float("inf"):
                deadline = time.monotonic() + STOP_GRACE
            if time.monotonic() > deadline:  # stopping took too long
                for left in self.pids:
                    os.kill(left, signal.SIGKILL)
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.1)
                continue
            index, ready = self.pids.pop(pid)
            try:
                served = os.read(ready, 1) == b"1"
            except BlockingIOError:
                served = False
            os.close(ready)
            if self.stopping:
                continue
            exit_code = os.waitstatus_to_exitcode(status)
            if not served:
                log.error(
                    "worker %d exited %d before it served: stopping the service", index, exit_code
                )
                code = exit_code or 1
                self._stop(signal.SIGTERM, None)
                continue
            log.warning("worker %d exited %d; starting it again", index, exit_code)
            self._fork(index)
        for sock in self.sockets:
            sock.close()
        return code
