"""A sync caller interrupted while it waits (Ctrl-C) stops the command it was waiting for, on
every runtime and through the service: the interruption reaches the caller only once the
command is gone, and the sandbox goes on working."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest

PROCESSES = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"


def _interrupt_when_present(sandbox, path: str) -> None:
    """SIGINT to the main thread (where the test waits on an exec) once `path` exists in the
    sandbox; the files API does not wait for the exec."""
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                sandbox.read_file(path)
            except Exception:  # not there yet
                time.sleep(0.05)
                continue
            signal.pthread_kill(main, signal.SIGINT)
            return

    threading.Thread(target=watch, daemon=True).start()


@pytest.fixture
def interruptible():
    """Ctrl-C as a terminal delivers it, however the suite was started: a run started in the
    background by a non-interactive shell (`./dev test &`, nohup, some CI runners) inherits
    SIGINT ignored, as POSIX has it, and an ignored SIGINT never reaches the waiting caller."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("how", ["exec", "exec_stream"])
def test_an_interrupted_exec_stops_its_command(sandbox, how, interruptible):
    marker = f"/tmp/interrupted-{uuid.uuid4().hex[:8]}"
    seconds = 3000 + uuid.uuid4().int % 600  # a sleep no other test runs
    command = f"touch {marker} && sleep {seconds}"
    _interrupt_when_present(sandbox, marker)
    with pytest.raises(KeyboardInterrupt):
        if how == "exec":
            sandbox.exec(command, timeout=None)
        else:
            for _ in sandbox.exec_stream(command, timeout=None):
                pass
    assert f"sleep {seconds}" not in sandbox.exec(PROCESSES).stdout
