"""Turning one model call into one `calls` row, written the moment the call completes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.proxy.dialects import Dialect, TokenData
from pomona.proxy.episodes import Episode, utcnow
from pomona.trajectories.redact import redact_body, redact_headers
from pomona.trajectories.writer import TrajectoryWriter


class Recorder:
    """The proxy's two trajectory writers; a no-op when no directory is configured."""

    def __init__(self, directory: Path | None, durable: bool = False):
        self.calls = TrajectoryWriter(directory, "calls", durable=durable) if directory else None
        self.episodes = (
            TrajectoryWriter(directory, "episodes", durable=durable) if directory else None
        )

    def close(self) -> None:
        for w in (self.calls, self.episodes):
            if w:
                w.close()

    def episode(self, ep: Episode, outcome: dict[str, Any]) -> None:
        if not self.episodes:
            return
        meta = dict(ep.metadata)
        known = {
            k: meta.pop(k)
            for k in list(meta)
            if k in self.episodes.schema.names and k != "metadata"
        }
        row = {
            "model": ep.model,
            **known,
            **{k: v for k, v in outcome.items() if k in self.episodes.schema.names},
            "episode": ep.key,
            "metadata": json.dumps(meta),
            "num_calls": ep.calls,
            "started_at": ep.opened_at,
            "ended_at": ep.closed_at or utcnow(),
        }
        row.setdefault("failure_kind", "none")
        self.episodes.write(row)


@dataclass
class Call:
    """A call in flight: started when the request arrives, written once by `finish`."""

    recorder: Recorder
    dialect: Dialect
    path: str
    headers: dict[str, str]
    episode: Episode | None = None
    row: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=time.perf_counter)
    finished: bool = False

    def __post_init__(self) -> None:
        self.row.update(
            call_id=f"{time.time_ns():x}-{id(self):x}",
            episode=self.episode.key if self.episode else None,
            dialect=self.dialect.name,
            path=self.path,
            request_headers=json.dumps(redact_headers(self.headers)),
            started_at=utcnow(),
        )

    def request(self, raw: bytes, body: Any = None, *, side: bool | None = None) -> None:
        text = raw.decode("utf-8", "replace")
        self.row["request"] = redact_body(text, body)
        if isinstance(body, dict):
            self.row["requested_model"] = (
                body.get("model") if isinstance(body.get("model"), str) else None
            )
            self.row["stream"] = self.dialect.is_stream(body)
        if side is not None and self.episode:
            self.row["side"] = side
            self.row["sequence"] = self.episode.next_sequence(side)
        elif side is not None:
            self.row["side"] = side

    def route(self, model: str | None, upstream: str) -> None:
        self.row.update(model=model, upstream=upstream)

    def first_byte(self) -> None:
        self.row.setdefault("ttfb_ms", (time.perf_counter() - self.t0) * 1000)

    def finish(
        self,
        status: str,
        status_code: int,
        *,
        response: str | None = None,
        final: dict[str, Any] | None = None,
        stream_text: str | None = None,
        error: str | None = None,
    ) -> None:
        if self.finished:
            return
        self.finished = True
        self.first_byte()
        if response is None and final is not None:
            response = json.dumps(final, ensure_ascii=False)
        self.row.update(
            status=status,
            status_code=status_code,
            response=response,
            response_stream=stream_text,
            error=error,
            ended_at=utcnow(),
            latency_ms=(time.perf_counter() - self.t0) * 1000,
        )
        if isinstance(final, dict) and status == "ok":
            self._tokens(final)
        if self.recorder.calls:
            self.recorder.calls.write(self.row)

    def _tokens(self, final: dict[str, Any]) -> None:
        self.row["usage"] = self.dialect.usage(final)
        tokens: TokenData = self.dialect.token_data(final)
        self.row.update(
            prompt_token_ids=tokens.prompt_ids,
            completion_token_ids=tokens.completion_ids,
            completion_logprobs=tokens.logprobs,
        )
        if self.episode and self.row.get("side") is False:
            verdict = self.episode.judge_tokens(tokens)
            self.row.update(token_faithful=verdict.faithful, token_faithful_reason=verdict.reason)
