"""What the programs Pomona runs inside a Claw-Eval episode's sandbox share: where things are,
the one-request-per-connection JSON protocol of their unix sockets, and who is on the other end
of a loopback TCP connection. Run on the payload's CPython; imports nothing of Pomona.

Layout (HOME is root-owned):

    HOME/bench/   0700  the benchmark's own files, copied unchanged from the user's checkout
    HOME/bin/     0700  Pomona's programs for root: this host, the native loop, the controls
    HOME/run/     0700  the services' sockets, their logs, the native loop's traces
    HOME/agent/   0755  what the agent side runs: the MCP relay, the native loop's launcher and
                        Claw-Eval's sandbox server (its tools: shell, files, media)
    HOME/tools.sock     the trusted host's socket for the agent side (tool calls, the user)
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HOME = Path("/opt/pomona-claw")
BENCH, BIN, RUN, AGENT = HOME / "bench", HOME / "bin", HOME / "run", HOME / "agent"
TOOLS_SOCKET = HOME / "tools.sock"
CONTROL_SOCKET = RUN / "control.sock"
SNAPSHOT_PORT = 18080  # Claw-Eval's sandbox server as root: file injection and env snapshots
AGENT_SANDBOX_PORT = 8080  # the same server as the agent, the native loop's tools
READY = RUN / "ready.json"


def request(path: Path | str, message: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    """Send one JSON request to a unix socket and read its one JSON reply."""
    return next(stream(path, message, timeout))


def stream(path: Path | str, message: dict[str, Any], timeout: float = 600) -> Iterator[Any]:
    """Send one JSON request; yield every JSON line the server answers with, until it closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(json.dumps(message).encode() + b"\n")
        with s.makefile("rb") as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line)


def _address(hexed: str) -> tuple[str, int]:
    """A /proc/net/tcp{,6} address (host-order 32-bit words in hex, then the port)."""
    host, port = hexed.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words)), int(port, 16)


def _same(a: tuple[str, int], b: tuple[Any, ...]) -> bool:
    ip = ipaddress.ip_address(b[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return a == (str(ip), int(b[1]))


def peer_uid(local: tuple[Any, ...], peer: tuple[Any, ...]) -> int | None:
    """The user owning the other end of a loopback TCP connection, from the kernel's socket
    table (the connecting socket is the entry whose local address is our peer and whose remote
    address is us). None when it is gone or not found."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            ends = len(fields) > 7 and _same(_address(fields[1]), peer)
            if ends and _same(_address(fields[2]), local):
                return int(fields[7])
    return None
