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
        self._buf += chunk
        lf, crlf = self._buf.rfind(b"\n\n"), self._buf.rfind(b"\r\n\r\n")
        end = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
        whole, self._buf = self._buf[:end], self._buf[end:]
        frames = []
        for raw in whole.replace(b"\r\n", b"\n").split(b"\n\n"):
            event, data = None, []
            for line in raw.decode("utf-8", "replace").split("\n"):
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
            if data or event:
                frames.append(Frame(event, "\n".join(data)))
        return frames, whole

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet finished (dropped if the stream ends here)."""
        return self._buf
