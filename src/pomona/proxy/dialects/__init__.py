"""The three wire dialects the proxy speaks, by name."""

from pomona.proxy.dialects.anthropic import Anthropic
from pomona.proxy.dialects.base import Dialect, Reply, TokenData, Tool, ToolCall
from pomona.proxy.dialects.chat import Chat
from pomona.proxy.dialects.responses import Responses

DIALECTS: dict[str, Dialect] = {d.name: d for d in (Chat(), Responses(), Anthropic())}

__all__ = [
    "DIALECTS",
    "Anthropic",
    "Chat",
    "Dialect",
    "Reply",
    "Responses",
    "TokenData",
    "Tool",
    "ToolCall",
]
