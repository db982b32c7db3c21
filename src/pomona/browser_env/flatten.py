"""Text views of BrowserGym-shaped page observations (dom.py), for agents that read text: the
accessibility tree one node a line with its bid (`[12] button 'Search', focused`), and the DOM
pruned to what an agent acts on (no scripts, styles or wrappers without meaning). The formats
follow BrowserGym's so prompts written for it read the same; the code is Pomona's own, and
`browsergym.utils.obs` gives its exact renderings from the same objects.
"""

from __future__ import annotations

import html
from typing import Any

SKIPPED_ROLES = {"InlineTextBox", "LineBreak", "none"}
SHOWN_PROPERTIES = ("focused", "checked", "selected", "expanded", "disabled", "required")
DROPPED_TAGS = {"script", "style", "head", "meta", "link", "noscript", "template", "#comment"}
KEPT_ATTRIBUTES = ("bid", "type", "name", "value", "placeholder", "aria-label", "href", "title",
                   "alt", "role", "checked", "selected", "disabled")  # fmt: skip


def axtree_text(axtree: dict[str, Any], extra: dict[str, dict[str, Any]] | None = None) -> str:
    nodes = axtree.get("nodes") or []
    if not nodes:
        return ""
    by_id = {n["nodeId"]: n for n in nodes}
    lines: list[str] = []

    def visit(node: dict[str, Any], depth: int, parent_name: str) -> None:
        role = node.get("role", {}).get("value", "")
        name = str(node.get("name", {}).get("value", "")).strip()
        bid = node.get("browsergym_id")
        shown = not node.get("ignored") and role not in SKIPPED_ROLES
        if role == "generic" and not name:
            shown = False
        if role == "StaticText" and (not name or name in parent_name):
            shown = False
        if shown:
            line = ("\t" * depth) + (f"[{bid}] " if bid else "") + f"{role} {name!r}"
            value = node.get("value", {}).get("value")
            if value not in (None, ""):
                line += f" value={value!r}"
            props = {p["name"]: p.get("value", {}).get("value") for p in node.get("properties", [])}
            marks = [k if props[k] is True else f"{k}={props[k]!r}" for k in SHOWN_PROPERTIES
                     if k in props and props[k] not in (False, None)]  # fmt: skip
            if bid and extra and (extra.get(bid) or {}).get("visibility", 1) == 0:
                marks.append("hidden")
            lines.append(line + "".join(f", {m}" for m in marks))
        for child in node.get("childIds", []):
            if child in by_id and child != node["nodeId"]:
                visit(by_id[child], depth + 1 if shown else depth, name or parent_name)

    visit(nodes[0], 0, "")
    return "\n".join(lines)


def pruned_html(snapshot: dict[str, Any]) -> str:
    docs = snapshot.get("documents") or []
    if not docs:
        return ""
    strings = snapshot["strings"]

    def text(i: int) -> str:
        return "" if i < 0 else str(strings[i])

    def document(d: int, depth: int) -> list[str]:
        nodes = docs[d]["nodes"]
        children: dict[int, list[int]] = {}
        for n, parent in enumerate(nodes["parentIndex"]):
            children.setdefault(parent, []).append(n)
        frames = dict(zip(nodes.get("contentDocumentIndex", {}).get("index", []),
                          nodes.get("contentDocumentIndex", {}).get("value", []), strict=True))  # fmt: skip
        out: list[str] = []

        def visit(n: int, depth: int) -> None:
            kind, tag = nodes["nodeType"][n], text(nodes["nodeName"][n]).lower()
            if kind == 3:  # text
                value = " ".join(text(nodes["nodeValue"][n]).split())
                if value:
                    out.append("  " * depth + html.escape(value))
                return
            if tag in DROPPED_TAGS or kind not in (1, 9, 11):
                return
            attributes = nodes["attributes"][n] if kind == 1 else []
            pairs = {
                text(attributes[i]): text(attributes[i + 1]) for i in range(0, len(attributes), 2)
            }
            kept = [(k, pairs[k]) for k in KEPT_ATTRIBUTES if k in pairs]
            meaningful = kind == 1 and (len(kept) > 1 or tag not in ("div", "span"))
            inner = depth + 1 if meaningful else depth
            if meaningful:
                attrs = "".join(f' {k}="{html.escape(v)}"' for k, v in kept)
                out.append("  " * depth + f"<{tag}{attrs}>")
            for child in children.get(n, []):
                visit(child, inner)
            if n in frames:
                out.extend(document(frames[n], inner))
            if meaningful:
                out.append("  " * depth + f"</{tag}>")

        visit(0, depth)
        return out

    return "\n".join(document(0, 0))
