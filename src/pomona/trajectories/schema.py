"""Versioned Arrow schemas of the two trajectory tables, `calls` and `episodes`.

The version travels in each file's schema metadata, so a reader can tell which layout a file
was written with long after the writer is gone.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1"

FAILURE_KINDS = ("none", "sandbox", "harness", "proxy", "upstream", "verifier", "timeout")
"""Why an episode did not produce a trustworthy reward. Infra failures are data, never a 0."""

CALL_STATUSES = ("ok", "upstream_error", "client_error", "refused", "incomplete")
"""`incomplete`: the client went away or the stream was cut before its end."""

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
        pa.field("status", pa.string()),  # one of CALL_STATUSES
        pa.field("status_code", pa.int32()),
        pa.field("error", pa.string()),
        pa.field("usage", _usage),
        pa.field("prompt_token_ids", pa.list_(pa.int64())),
        pa.field("completion_token_ids", pa.list_(pa.int64())),
        pa.field("completion_logprobs", pa.list_(pa.float64())),
        pa.field("token_faithful", pa.bool_()),  # null when the upstream gave no token ids
        pa.field("token_faithful_reason", pa.string()),
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
        raise ValueError(
            f"unknown trajectory table {table!r}; expected one of {sorted(SCHEMAS)}"
        ) from None
