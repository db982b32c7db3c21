"""The in-pod gate, run for real: the same scripts and the same static busybox a sandbox pod
gets, here on the host with a temporary run directory in place of the pod's tmpfs. What the
API server adds on top (the WebSocket channels) cannot run here; everything the gate decides
does: argv, exit codes, stdin EOF, users, process groups, draining, terminals, idling as pid 1
and the gateway forwarder."""

from __future__ import annotations

import contextlib
import os
import pty
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pomona.orchestrator.runtimes.kubernetes import gate

BUSYBOX = "/bin/busybox"
pytestmark = pytest.mark.skipif(
    not os.path.exists(BUSYBOX) or os.geteuid() != 0,
    reason="needs Debian's busybox-static and root (./dev setup)",
)


@dataclass
class Ran:
    code: int
    out: bytes
    err: bytes


class Gate:
    """The gate's scripts with the run directory moved under tmp_path."""

    def __init__(self, run_dir: Path):
        (run_dir / "x").mkdir(parents=True)
        run_dir.chmod(0o700)
        self.run_dir = run_dir
        self.exec_script = gate.EXEC.replace(gate.RUN_DIR, str(run_dir))
        self.signal_script = gate.SIGNAL.replace(gate.RUN_DIR, str(run_dir))
        self.pty_script = gate.PTY.replace(gate.RUN_DIR, str(run_dir))

    def start(
        self,
        argv: list[str],
        uid: int = 1000,
        cwd: str = "/tmp",
        stdin: bytes | None = None,
        exec_id: str = "e1",
    ) -> subprocess.Popen:
        command = gate.exec_argv(
            exec_id,
            uid,
            cwd,
            None if stdin is None else len(stdin),
            argv,
            busybox=BUSYBOX,
            script=self.exec_script,
        )
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        if stdin:
            proc.stdin.write(stdin)  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        return proc  # stdin stays open: like an exec stream, EOF never comes from the caller

    def run(self, argv: list[str], **kwargs) -> Ran:
        proc = self.start(argv, **kwargs)
        out, err = proc.communicate(timeout=60)
        return Ran(proc.returncode, out, err)

    def signal(self, exec_id: str, signum: int, uid: int = 1000) -> None:
        subprocess.run(
            gate.signal_argv(exec_id, signum, uid, busybox=BUSYBOX, script=self.signal_script),
            check=True,
            timeout=30,
        )


@pytest.fixture
def g(tmp_path: Path) -> Gate:
    return Gate(tmp_path / "run")


def _alive(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_argv_exit_code_and_streams(g):
    assert g.run(["printf", "%s|", "a b", "c'd", "$HOME"]).out == b"a b|c'd|$HOME|"
    r = g.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (r.code, r.out, r.err) == (7, b"out\n", b"err\n")
    assert g.run(["sh", "-c", "exit 124"]).code == 124


def test_drops_to_the_sandbox_user_with_no_capabilities(g):
    r = g.run(["sh", "-c", "id -u; id -G; grep CapEff /proc/self/status"])
    assert r.out.decode().split("\n")[:3] == ["1000", "1000", "CapEff:\t0000000000000000"]
    assert g.run(["id", "-u"], uid=0).out == b"0\n"


def test_stdin_is_exactly_the_bytes_sent_then_eof(g):
    data = os.urandom(200_000)
    r = g.run(["sh", "-c", "cat | wc -c"], stdin=data)
    assert r.out.strip() == b"200000"
    assert g.run(["cat"], stdin=b"").out == b""
    assert g.run(["cat"]).out == b""  # no stdin at all: /dev/null, never the stream


def test_cwd_and_a_missing_one(g):
    with tempfile.TemporaryDirectory(dir="/tmp") as work:  # pytest's tmp_path is closed to uid 1000
        os.chmod(work, 0o755)
        assert g.run(["pwd"], cwd=work).out.decode().strip() == work
    bad = g.run(["true"], cwd="/does/not/exist")
    assert bad.code != 0 and b"can't cd" in bad.err


def test_signal_kills_the_whole_group_and_nothing_else(g, tmp_path):
    marker = f"sleep 4{os.getpid() % 1000:03d}"
    bystander = subprocess.Popen(["sleep", "300"])  # stands for the pod's idle process
    try:
        proc = g.start(
            ["sh", "-c", f"{marker}1 & {marker}2 & echo started; wait"], exec_id="victim"
        )
        assert proc.stdout.readline() == b"started\n"  # type: ignore[union-attr]
        g.signal("victim", 9)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + 9 and err == b""
        assert _alive(marker) == []  # the background children died with the group
        assert bystander.poll() is None
        assert os.listdir(g.run_dir / "x") == []  # pid file and FIFOs are gone
    finally:
        bystander.kill()
        bystander.wait()


def test_a_background_child_holding_stdout_does_not_hang(g):
    started = time.monotonic()
    child = f"sleep 30.{os.getpid()}"  # this test's own: the cleanup kills no other's sleep
    r = g.run(["sh", "-c", f"{child} & echo holds-stdout"])
    assert r.out == b"holds-stdout\n" and r.code == 0
    assert time.monotonic() - started < 25  # far below the child's 30 s: it was not waited for
    subprocess.run(["pkill", "-f", f"^{child}$"])


def test_output_still_on_its_way_when_the_command_exits_arrives_whole(g):
    # a slow reader (an exec stream on a loaded API server): the command has long exited while
    # its output still waits in the FIFO; the gate forwards it all, however long that takes
    proc = g.start(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"])
    out = bytearray()
    while chunk := proc.stdout.read1(4096):  # type: ignore[union-attr]
        out += chunk
        time.sleep(0.05)
    assert proc.wait(timeout=60) == 0
    assert len(out) == 300_000 and set(out) == {ord("x")}


def test_terminal_has_a_tty_its_size_and_dies_by_signal(g):
    master, slave = pty.openpty()
    argv = gate.pty_argv(
        "t1",
        1000,
        "/tmp",
        30,
        100,
        ["sh", "-c", "tty -s && echo HAS_TTY; stty size; id -u; exec sleep 60"],
        busybox=BUSYBOX,
        script=g.pty_script,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LINES", "COLUMNS")}  # pytest sets them
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=env
    )
    os.close(slave)
    out = b""
    while b"1000" not in out:
        out += os.read(master, 1024)
    assert b"HAS_TTY" in out and b"30 100" in out
    g.signal("t1", 9)
    assert proc.wait(timeout=30) == -9
    os.close(master)


def test_idle_reaps_orphans_and_leaves_on_sigterm(tmp_path):
    """The pod's pid 1: run in a fresh pid namespace, with the run dir on a tmp path."""
    idle = gate.IDLE.replace(gate.RUN_DIR, str(tmp_path / "run"))
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", BUSYBOX, "sh", "-c", idle, BUSYBOX]
    )
    try:
        deadline = time.monotonic() + 30
        run = tmp_path / "run"

        def private() -> bool:  # made, then closed to all but root (mkdir, then chmod)
            return (run / "x").exists() and run.stat().st_mode & 0o777 == 0o700

        while not private() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert private()
        init = int(
            subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()[0]
        )
        # an orphan whose parent exits at once is reparented to pid 1, which must reap it
        subprocess.run(
            ["nsenter", "-t", str(init), "-p", "-m", BUSYBOX, "sh", "-c", "sleep 0.2 &"], check=True
        )
        time.sleep(1)
        children = subprocess.run(
            ["ps", "--ppid", str(init), "-o", "stat="], capture_output=True, text=True
        ).stdout.split()
        assert "Z" not in "".join(children)
        os.kill(init, 15)
        assert proc.wait(timeout=30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def _answering_server() -> Iterator[int]:
    """Reads to the client's EOF, then answers: a half-closed connection must stay usable."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve() -> None:
        conn, _ = server.accept()
        request = b""
        while chunk := conn.recv(100):
            request += chunk
        conn.sendall(b"got:" + request)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        thread.join(10)
        server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gateway_forwarder_relays_a_half_closed_connection():
    with _answering_server() as target:
        port = _free_port()
        forwarder = subprocess.Popen(gate.forwarder(BUSYBOX, port, "127.0.0.1", target))
        try:
            conn = None
            deadline = time.monotonic() + 30
            while conn is None and time.monotonic() < deadline:
                try:
                    conn = socket.create_connection(("127.0.0.1", port), 5)
                except ConnectionRefusedError:
                    time.sleep(0.05)
            assert conn is not None, "the forwarder never listened"
            with conn:
                conn.sendall(b"ping")
                conn.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := conn.recv(100):
                    answer += chunk
            assert answer == b"got:ping"
        finally:
            forwarder.kill()
            forwarder.wait()
