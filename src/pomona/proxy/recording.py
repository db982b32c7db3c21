"""Turning one model call into one `calls` row, written the moment the call completes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pomona.proxy.capture import Exchange
from pomona.proxy.dialects import DIALECTS, Dialect, TokenData
from pomona.proxy.episodes import Episode, utcnow
from pomona.proxy.errors import context_exceeded
from pomona.proxy.upstream import UpstreamCall
from pomona.trajectories.redact import (
    Scrubber,
    redact_body,
    redact_headers,
    redact_url,
    redact_value,
)
from pomona.trajectories.storage import open_writer

_BODIES = (
    "response",
    "response_stream",
    "client_response",
    "upstream_request",
    "upstream_response",
)
EPISODE_COLUMNS = ("run", "benchmark", "task", "harness")
"""The episode's metadata (validated as strings when it is opened) copied to each calls row."""
_TEXT_COLUMNS = (
    *EPISODE_COLUMNS, "request_headers", "request", "response", "response_stream",
    "client_response", "error", "upstream_url", "upstream_request_headers", "upstream_request", "upstream_response_headers",
    "upstream_response",
)  # fmt: skip


@dataclass(frozen=True)
class CallRecord:
    """One finished model call as an observer sees it: its row (as stored, secrets redacted)
    and the timings a row does not hold."""

    row: Mapping[str, Any]
    upstream_ttfb_s: float | None  # the upstream's own time to first byte; None: no upstream
    write_s: float | None  # appending the row to the store; None when nothing is stored


class CallObserver(Protocol):
    """Told of every model call once its row is written (every call, answered or refused, ends
    in exactly one row), so what it counts agrees with the trajectories. metrics.py is one; the
    app passes them in (`create_app(config, observers=...)`)."""

    def recorded(self, call: CallRecord) -> None: ...


class Recorder:
    """The proxy's two trajectory writers (none when no directory is configured), and the
    observers told of each call row.

    `secrets` are values the proxy itself holds (upstream keys, its own API keys): they are
    blanked wherever they would appear in a row.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        durable: bool = False,
        secrets: Iterable[object] = (),
        observers: Iterable[CallObserver] = (),
    ):
        # a directory, or an object store URI (many proxy replicas, one store: storage.py)
        self.calls = open_writer(directory, "calls", durable=durable) if directory else None
        self.episodes = open_writer(directory, "episodes", durable=durable) if directory else None
        self.secrets = [s for s in secrets if isinstance(s, str)]
        self.observers = list(observers)

    def call(self, row: Mapping[str, Any], upstream_ttfb_s: float | None = None) -> None:
        """Write one `calls` row, then tell the observers."""
        write_s = None
        if self.calls is not None:
            start = time.perf_counter()
            self.calls.write(row)
            write_s = time.perf_counter() - start
        record = CallRecord(row, upstream_ttfb_s, write_s)
        for observer in self.observers:
            observer.recorded(record)

    def close(self) -> None:
        for w in (self.calls, self.episodes):
            if w:
                w.close()

    def episode(self, ep: Episode, outcome: dict[str, Any], ended_at: Any) -> None:
        """Write the `episodes` row; raises (and writes nothing) if the row is malformed."""
        if not self.episodes:
            return
        scrub = Scrubber(self.secrets)
        meta, _ = redact_value(dict(ep.metadata), scrub)
        known = {k: meta.pop(k) for k in list(meta) if k in self.episodes.schema.names}
        known.pop("metadata", None)
        row = {
            "model": ep.model,
            **known,
            **outcome,
            "episode": ep.key,
            "metadata": scrub.scrub(json.dumps(meta)),
            "num_calls": ep.calls,
            "started_at": ep.opened_at,
            "ended_at": ended_at,
        }
        for k in ("failure_message", "run", "benchmark", "task", "harness", "runtime"):
            if isinstance(row.get(k), str):
                row[k] = scrub.scrub(row[k])
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
    exchange: Exchange | None = None  # the upstream HTTP exchange, once one is made
    upstream: UpstreamCall | None = None  # the request to the model's route, if it has one
    upstream_dialect: str | None = None

    def __post_init__(self) -> None:
        self.scrubber = Scrubber(self.recorder.secrets)
        self.row.update(
            call_id=f"{time.time_ns():x}-{id(self):x}",
            episode=self.episode.key if self.episode else None,
            **self._episode_columns(),
            dialect=self.dialect.name,
            path=self.path,
            request_headers=json.dumps(redact_headers(self.headers, self.scrubber)),
            started_at=utcnow(),
        )

    def _episode_columns(self) -> dict[str, str | None]:
        """What the episode belongs to (its run, task...), as its metadata said at opening, so
        each call is tied to its run before the episode's own row is written at its end."""
        if self.episode is None:
            return dict.fromkeys(EPISODE_COLUMNS)
        meta, _ = redact_value(dict(self.episode.metadata), self.scrubber)  # learns its secrets
        return {k: meta.get(k) for k in EPISODE_COLUMNS}  # scrubbed with the text columns

    def request(self, raw: bytes, body: Any = None, *, side: bool | None = None) -> None:
        text = raw.decode("utf-8", "replace")
        self.row["request"] = redact_body(text, body, self.scrubber)
        if isinstance(body, dict):
            model = body.get("model")
            self.row["requested_model"] = model if isinstance(model, str) else None
            self.row["stream"] = self.dialect.is_stream(body)
        if side is not None and self.episode:
            self.row["side"] = side
            self.row["sequence"] = self.episode.next_sequence(side)
        elif side is not None:
            self.row["side"] = side

    def route(self, model: Any, upstream: str | None, upstream_dialect: str | None = None) -> None:
        self.row.update(model=model if isinstance(model, str) else None, upstream=upstream)
        self.upstream_dialect = upstream_dialect

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
        """Write the row. `response` is the whole body sent, `stream_text` the SSE text sent."""
        if self.finished:
            return
        self.finished = True
        self.first_byte()
        client = stream_text if stream_text is not None else response
        if response is None and final is not None:
            response = json.dumps(final, ensure_ascii=False)
        self.row.update(
            status=status,
            status_code=status_code,
            response=response,
            response_stream=stream_text,
            client_response=client,
            error=error,
            ended_at=utcnow(),
            latency_ms=(time.perf_counter() - self.t0) * 1000,
        )
        self._upstream()
        if status == "upstream_error" and context_exceeded(
            self.row.get("upstream_status_code") or status_code,
            error,
            response,
            self.row.get("upstream_response"),
        ):
            self.row["status"] = "context_exceeded"
        if isinstance(final, dict) and status == "ok":
            self._tokens(final)
        self._redact()
        self.recorder.call(self.row, self.upstream.ttfb if self.upstream else None)

    def _upstream(self) -> None:
        ex = self.exchange
        if ex is None or ex.url is None:
            return
        self.row.update(
            upstream_dialect=self.upstream_dialect,
            upstream_url=redact_url(ex.url, self.scrubber),
            upstream_request_headers=json.dumps(redact_headers(ex.request_headers, self.scrubber)),
            upstream_request=ex.request_body.decode("utf-8", "replace"),
            upstream_status_code=ex.status,
            upstream_response_headers=(
                json.dumps(redact_headers(ex.response_headers, self.scrubber))
                if ex.status is not None
                else None
            ),
            upstream_response=(
                ex.response_body.decode("utf-8", "replace") if ex.status is not None else None
            ),
        )

    def _upstream_final(self) -> dict[str, Any] | None:
        """The upstream's own final answer, parsed in the dialect it was spoken in."""
        ex, name = self.exchange, self.upstream_dialect
        if ex is None or ex.status is None or name not in DIALECTS:
            return None
        if "text/event-stream" in ex.response_headers.get("content-type", ""):
            return DIALECTS[name].assemble(ex.frames())
        data = ex.response_json()
        return data if isinstance(data, dict) else None

    def _tokens(self, final: dict[str, Any]) -> None:
        self.row["usage"] = self.dialect.usage(final)
        tokens: TokenData = self.dialect.token_data(final)
        if tokens.prompt_ids is None and self.row.get("upstream") != "passthrough":
            upstream = self._upstream_final()
            if upstream is not None:
                tokens = DIALECTS[self.upstream_dialect].token_data(upstream)  # type: ignore[index]
        self.row.update(
            prompt_token_ids=tokens.prompt_ids,
            completion_token_ids=tokens.completion_ids,
            completion_logprobs=tokens.logprobs,
        )
        if self.episode and self.row.get("side") is False:
            verdict = self.episode.judge_tokens(tokens)
            self.row.update(token_faithful=verdict.faithful, token_faithful_reason=verdict.reason)

    def _redact(self) -> None:
        """Secrets by name in every body, then every secret value seen blanked everywhere."""
        for k in _BODIES:  # JSON bodies, or SSE texts (redact_body tells them apart)
            if self.row.get(k):
                self.row[k] = redact_body(self.row[k], None, self.scrubber)
        for k in _TEXT_COLUMNS:
            self.row[k] = self.scrubber.scrub(self.row.get(k))
