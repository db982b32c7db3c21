"""Terminal sessions, with the four checks of Orchard's PTY benchmark (reference/orchard.md §5)."""

from __future__ import annotations

import signal
import time


def read_until(pty, marker: bytes, limit: float = 10.0) -> bytes:
    out, deadline = b"", time.monotonic() + limit
    while marker not in out and time.monotonic() < deadline:
        out += pty.read(timeout=0.5)
    return out


def test_has_a_tty_and_exit_code(sandbox):
    with sandbox.pty(["bash", "-c", "tty -s && echo HAS_TTY; echo done; exit 7"]) as pty:
        out = read_until(pty, b"done")
        assert b"HAS_TTY" in out and b"done" in out
        assert pty.wait(timeout=10) == 7


def test_cat_echoes_input(sandbox):
    with sandbox.pty("cat") as pty:
        pty.write(b"token-1234\n")
        assert b"token-1234" in read_until(pty, b"token-1234")


def test_kill_gives_minus_nine(sandbox):
    with sandbox.pty("sleep 60") as pty:
        pty.signal(signal.SIGKILL)
        assert pty.wait(timeout=10) == -9
    assert sandbox.exec("echo alive").stdout == "alive\n"


def test_resize_changes_stty_size(sandbox):
    with sandbox.pty(["bash", "-c", "stty size; read _; stty size"], rows=24, cols=80) as pty:
        assert b"24 80" in read_until(pty, b"24 80")
        pty.resize(50, 200)
        pty.write(b"\n")
        assert b"50 200" in read_until(pty, b"50 200")
        assert pty.wait(timeout=10) == 0
