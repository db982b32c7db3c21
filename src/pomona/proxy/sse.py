"""Server-sent events: encoding frames and incrementally parsing a byte stream back into them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Frame:
    event: str | None
    data: str

    def json(self) -> Any:
        """The data as JSON, or None for non-JSON data such as `[DONE]`."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def frame(data: Any, event: str | None = None) -> bytes:
    """One SSE frame; `data` is JSON-encoded unless it is already a string."""
    text = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


class Parser:
    """Feed bytes as they arrive; get back every frame completed so far."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> Iterator[Frame]:
        self._buf += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n\n", 1)
            event, data = None, []
            for line in raw.decode("utf-8", "replace").split("\n"):
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
            if data or event:
                yield Frame(event, "\n".join(data))
