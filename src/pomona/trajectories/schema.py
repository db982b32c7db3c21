"""Versioned Arrow schemas of the two trajectory tables, `calls` and `episodes`.

The version travels in each file's schema metadata, so a reader can tell which layout a file
was written with long after the writer is gone. Versions only add columns; a reader fills the
columns an older file lacks with nulls.

A `calls` row holds the four bodies of a call, as text (UTF-8; JSON for whole bodies, the SSE
text for streams), secrets redacted:

| body | column | note |
|---|---|---|
| what the client sent | `request` | byte for byte |
| what the proxy sent upstream | `upstream_request` | renamed model, added fields, the translation |
| what the upstream answered | `upstream_response` | content-decoded (gzip...), whole or as streamed |
| what the client got | `client_response` | byte for byte, whole or as streamed |

`upstream_*` columns are null when no upstream was called (the scripted model, a policy, a
refused request). Token ids and logprobs come from the upstream's own answer whenever it has
them, so a translated call keeps them even though the client's dialect cannot carry them.

A `calls` row also names what its episode belongs to: `run`, `benchmark`, `task` and `harness`,
as given in the episode's metadata when it was opened (`POST /episodes`), so a call is tied to
its run while the episode is still running (its `episodes` row is written only when it ends).

Version history: 1, the first layout; 2 adds `client_response`, the `upstream_*` columns and
`upstream_dialect`; 3 adds the episode's `run`, `benchmark`, `task` and `harness` to `calls`;
4 adds `sampling` (the sampling parameters as sent to the engine, JSON), `sampling_pinned` and
`sampling_pinned_reason` (were they the model's pinned ones: pomona.proxy.sampling).
"""

from __future__ import annotations

from typing import get_args

import pyarrow as pa

from pomona.errors import FailureKind, PomonaError

SCHEMA_VERSION = "4"

FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
"""The values of `episodes.failure_kind` (pomona.errors.FailureKind)."""


class TrajectoryError(PomonaError, ValueError):
    """A row, table or store the trajectory layer cannot take (an unknown column or value, a
    store it cannot open)."""


CALL_STATUSES = (
    "ok",
    "upstream_error",
    "context_exceeded",
    "client_error",
    "refused",
    "incomplete",
)
"""`incomplete`: the client went away or the stream was cut before its end. `context_exceeded`:
the upstream refused the request as longer than the model's context (proxy.errors
.context_exceeded), the episode's own end rather than an upstream failure."""

_ts = pa.timestamp("us", tz="UTC")

_usage = pa.struct(
    [
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("total_tokens", pa.int64()),
    ]
)


_artifacts = pa.list_(pa.struct([pa.field("name", pa.string()), pa.field("uri", pa.string())]))


def _schema(table: str, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(
        fields, metadata={"pomona.table": table, "pomona.schema_version": SCHEMA_VERSION}
    )


CALLS = _schema(
    "calls",
    [
        pa.field("call_id", pa.string(), nullable=False),
        pa.field("episode", pa.string()),
        # the episode's own, from its metadata at opening; null for calls outside any episode
        pa.field("run", pa.string()),
        pa.field("benchmark", pa.string()),
        pa.field("task", pa.string()),
        pa.field("harness", pa.string()),
        pa.field("sequence", pa.int64()),  # order within (episode, side): main turns 0, 1, 2...
        pa.field("side", pa.bool_()),  # tool-less request (title generation...): not a policy turn
        pa.field("dialect", pa.string()),  # chat | responses | anthropic
        pa.field("path", pa.string()),
        pa.field("model", pa.string()),  # the model the call was routed to
        pa.field("requested_model", pa.string()),  # what the client put in the body
        pa.field("upstream", pa.string()),  # scripted | passthrough | litellm
        pa.field("stream", pa.bool_()),
        pa.field("request_headers", pa.string()),  # JSON, secrets redacted
        pa.field("request", pa.string()),  # raw JSON body as received, secrets redacted
        pa.field("response", pa.string()),  # JSON body; for streams, the assembled final object
        pa.field("response_stream", pa.string()),  # raw SSE text as sent to the client
        pa.field("client_response", pa.string()),  # the bytes the client got, streamed or not
        pa.field("upstream_dialect", pa.string()),  # chat | responses | anthropic on the wire
        pa.field("upstream_url", pa.string()),
        pa.field("upstream_request_headers", pa.string()),  # JSON, secrets redacted
        pa.field("upstream_request", pa.string()),  # the body sent upstream
        pa.field("upstream_status_code", pa.int32()),
        pa.field("upstream_response_headers", pa.string()),  # JSON
        pa.field("upstream_response", pa.string()),  # the upstream's answer, content-decoded
        pa.field("status", pa.string()),  # one of CALL_STATUSES
        pa.field("status_code", pa.int32()),
        pa.field("error", pa.string()),
        pa.field("usage", _usage),
        pa.field("prompt_token_ids", pa.list_(pa.int64())),
        pa.field("completion_token_ids", pa.list_(pa.int64())),
        pa.field("completion_logprobs", pa.list_(pa.float64())),
        pa.field("token_faithful", pa.bool_()),  # null when the upstream gave no token ids
        pa.field("token_faithful_reason", pa.string()),
        pa.field("sampling", pa.string()),  # JSON: temperature, top_p, max_tokens, seed as sent
        pa.field("sampling_pinned", pa.bool_()),  # null: the model has no pin, or no engine
        pa.field("sampling_pinned_reason", pa.string()),
        pa.field("started_at", _ts),
        pa.field("ended_at", _ts),
        pa.field("ttfb_ms", pa.float64()),  # time to the first response byte sent to the client
        pa.field("latency_ms", pa.float64()),
    ],
)

EPISODES = _schema(
    "episodes",
    [
        pa.field("episode", pa.string(), nullable=False),
        pa.field("run", pa.string()),
        pa.field("benchmark", pa.string()),
        pa.field("task", pa.string()),
        pa.field("harness", pa.string()),
        pa.field("harness_version", pa.string()),
        pa.field("model", pa.string()),
        pa.field("runtime", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("resolved", pa.bool_()),
        pa.field("failure_kind", pa.string()),  # one of FAILURE_KINDS
        pa.field("failure_message", pa.string()),
        pa.field("artifacts", _artifacts),  # [{name, uri}]; not a map: `datasets` has no map type
        pa.field("metadata", pa.string()),  # JSON
        pa.field("num_calls", pa.int64()),
        pa.field("started_at", _ts),
        pa.field("ended_at", _ts),
    ],
)

SCHEMAS: dict[str, pa.Schema] = {"calls": CALLS, "episodes": EPISODES}


def schema_for(table: str) -> pa.Schema:
    """The schema of `table`, with a clear error for a typo."""
    try:
        return SCHEMAS[table]
    except KeyError:
        raise TrajectoryError(
            f"unknown trajectory table {table!r}; expected one of {sorted(SCHEMAS)}"
        ) from None
