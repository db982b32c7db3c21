"""The commands a memory-runtime sandbox of these tests understands (runtimes/memory.py is the
test double; this is its handler). Each is an argv (a string is split like a shell would):

    echo WORD...             WORD... and a newline on stdout
    say OUT ERR CODE         OUT on stdout, ERR on stderr, exit CODE
    cat                      stdin to stdout
    sleep SECONDS            sleep, then exit 0 (a timeout or a cancel cuts it short)
    hold NAME                wait until the test calls `release(NAME)`, then exit 0
    count NAME               append a line to the sandbox's file /workspace/NAME, print the count
    drip                     "one" on stdout, hold until `release("drip")`, "two" on stderr

Anything else exits 127 saying so. Every command a sandbox ran is in its `commands` list.
"""

from __future__ import annotations

import asyncio
import shlex
import threading

from pomona.orchestrator.runtimes.memory import Command

_released: dict[str, threading.Event] = {}
_started: dict[str, threading.Event] = {}
LIMIT = 60.0  # seconds a test waits for a hold it is owed before it fails (only bounds a hang)


def _event(table: dict[str, threading.Event], name: str) -> threading.Event:
    return table.setdefault(name, threading.Event())


def release(name: str) -> None:
    _event(_released, name).set()


def reset(name: str) -> None:
    _released.pop(name, None)
    _started.pop(name, None)


def wait_started(name: str) -> bool:
    """In the test's thread: until a `hold NAME` runs."""
    return _event(_started, name).wait(LIMIT)


def wait_released(name: str) -> bool:
    """In the test's thread (a request body being sent, say): until `release(NAME)`."""
    return _event(_released, name).wait(LIMIT)


async def _hold(name: str) -> None:
    """Wait for a release from the test's thread without blocking this loop or a thread (a
    cancel, as from a timeout, ends it at once)."""
    _event(_started, name).set()
    while not _event(_released, name).is_set():
        await asyncio.sleep(0.005)


async def handler(command: Command) -> int:
    raw = command.request.command
    argv = shlex.split(raw) if isinstance(raw, str) else list(raw)
    name, args = argv[0], argv[1:]
    if name == "echo":
        await command.write(" ".join(args) + "\n")
    elif name == "say":
        await command.write(args[0])
        await command.write(args[1], "stderr")
        return int(args[2])
    elif name == "cat":
        await command.write(await command.stdin.read())
    elif name == "sleep":
        await asyncio.sleep(float(args[0]))
    elif name == "hold":
        await _hold(args[0])
    elif name == "count":
        path = f"/workspace/{args[0]}"
        node = command.sandbox.files.get(path)
        lines = (node.data if node else b"") + b"ran\n"
        command.sandbox.write(path, lines)
        await command.write(f"{lines.count(b'ran')}\n")
    elif name == "drip":
        await command.write("one\n")
        await _hold("drip")
        await command.write("two\n", "stderr")
    else:
        await command.write(f"{name}: command not found\n", "stderr")
        return 127
    return 0
