"""The Orchard dataset's schemas (microsoft/Orchard on Hugging Face, reference/orchard.md §6.5),
both ways: Pomona episodes out as `swe` rows, and `swe` or `gui` rows in as SFT conversations.

  swe: tools (JSON text), messages (list of {role, content, tool_call_id, tool_calls: [{id,
       type, function: {name, arguments}}]}, every field a string), metadata (JSON text with
       verify_status)
  gui: messages (list of {role, content}), images (list of images), reward, status, metadata
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pomona.errors import NoData, UsageError

_CALL = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("type", pa.string()),
        pa.field(
            "function",
            pa.struct([pa.field("name", pa.string()), pa.field("arguments", pa.string())]),
        ),
    ]
)
_MESSAGE = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("tool_call_id", pa.string()),
        pa.field("tool_calls", pa.list_(_CALL)),
    ]
)
SWE = pa.schema(
    [
        pa.field("tools", pa.string()),
        pa.field("messages", pa.list_(_MESSAGE)),
        pa.field("metadata", pa.string()),
    ]
)
GUI_COLUMNS = ("messages", "images", "reward", "status", "metadata")


def swe_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat-template message with every field present and a string, as the swe schema has it."""
    return {
        "role": message["role"],
        "content": message.get("content") or "",
        "tool_call_id": message.get("tool_call_id") or "",
        "tool_calls": [
            {
                "id": c.get("id") or "",
                "type": c.get("type") or "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"]
                    if isinstance(c["function"]["arguments"], str)
                    else json.dumps(c["function"]["arguments"]),
                },
            }
            for c in message.get("tool_calls") or []
        ],
    }


def swe_row(messages: list[dict], tools: list[dict], metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "tools": json.dumps(tools),
        "messages": [swe_message(m) for m in messages],
        "metadata": json.dumps(metadata),
    }


def write_swe(rows: list[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SWE), path)
    return path


def _message(m: dict[str, Any]) -> dict[str, Any]:
    """An Orchard message back to chat-template shape (empty placeholders dropped)."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c.get("id") or "",
                "type": c.get("type") or "function",
                "function": dict(c["function"]),
            }
            for c in m["tool_calls"]
        ]
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.rglob("*.parquet"))
        if not files:
            raise NoData(f"no .parquet files under {path}")
        return files
    if not path.exists():
        raise NoData(f"no Orchard data at {path}")
    return [path]


def load(path: str | os.PathLike[str], schema: str | None = None) -> list[dict[str, Any]]:
    """Orchard rows (a parquet file or a directory of them, e.g. swe/train/) as SFT examples:
    {"messages", "tools", "metadata"} plus, for gui, {"images", "reward", "status"}.
    The schema is told by the columns when not given."""
    table = pa.concat_tables(pq.read_table(f) for f in _files(Path(path)))
    names = set(table.column_names)
    kind = schema or ("gui" if "images" in names else "swe")
    need = {"swe": {"tools", "messages", "metadata"}, "gui": set(GUI_COLUMNS)}.get(kind)
    if need is None:
        raise UsageError(f"unknown Orchard schema {kind!r}; expected swe or gui")
    if not need <= names:
        raise UsageError(
            f"not Orchard {kind} data: missing columns {sorted(need - names)} in {path}"
        )
    out = []
    for row in table.to_pylist():
        example: dict[str, Any] = {
            "messages": [_message(m) for m in row["messages"]],
            "tools": json.loads(row["tools"]) if kind == "swe" and row["tools"] else [],
            "metadata": json.loads(row["metadata"]) if row.get("metadata") else {},
        }
        if kind == "gui":
            example.update(images=row["images"], reward=row["reward"], status=row["status"])
        out.append(example)
    return out


def to_dataset(path: str | os.PathLike[str], schema: str | None = None) -> Any:
    """Orchard data as a `datasets.Dataset` TRL's SFTTrainer takes (messages; tools as JSON
    text, which TRL decodes)."""
    import datasets

    rows = load(path, schema)
    return datasets.Dataset.from_list(
        [
            {"messages": [swe_message(m) for m in r["messages"]], "tools": json.dumps(r["tools"])}
            for r in rows
        ]
    )
