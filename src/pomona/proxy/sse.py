"""Server-sent events: encoding frames and incrementally parsing a byte stream back into them."""

from __future__ import annotations

import json
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
    """Feed bytes as they arrive; get back the frames completed so far and their raw bytes.

    Relaying only whole events means a stream cut mid-event never hands the client a torn
    event glued to the error event that follows it.
    """

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> tuple[list[Frame], bytes]:
        """The frames completed by `chunk`, and their raw bytes."""
        events = self.events(chunk)
        return [f for _, f in events if f is not None], b"".join(raw for raw, _ in events)

    def events(self, chunk: bytes) -> list[tuple[bytes, Frame | None]]:
        """Each event completed by `chunk`: its raw bytes (separator included) and its frame
        (None for an event with neither data nor an event name, such as a comment)."""
        buf = self._buf + chunk
        out: list[tuple[bytes, Frame | None]] = []
        start = 0
        while True:
            lf, crlf = buf.find(b"\n\n", start), buf.find(b"\r\n\r\n", start)
            ends = [i + n for i, n in ((lf, 2), (crlf, 4)) if i >= 0]
            if not ends:
                self._buf = buf[start:]
                return out
            end = min(ends)
            out.append((buf[start:end], _frame(buf[start:end])))
            start = end

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet finished (dropped if the stream ends here)."""
        return self._buf


def _frame(raw: bytes) -> Frame | None:
    event, data = None, []
    for line in raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n"):
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return Frame(event, "\n".join(data)) if data or event else None
