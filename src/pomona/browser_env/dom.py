"""BrowserGym's page observations, taken Pomona's way: every element of every frame gets a stable
`bid` attribute, then Chrome's own DOM snapshot and accessibility tree are read over CDP in the
shapes BrowserGym hands its agents (`dom_object`, `axtree_object` with `browsergym_id` on each
node, `extra_element_properties` {bid: visibility, bbox, clickable, set_of_marks}), so
`browsergym.utils.obs` (flatten_axtree_to_str, flatten_dom_to_str, prune_html, overlay_som)
reads them unchanged.

How it differs from BrowserGym's own extraction, and why:
  - bids reach the accessibility tree by the node ids both trees share (`backendNodeId`), not by
    writing them into ARIA attributes and reading them back, so the page's accessibility is
    never altered;
  - visibility is the share of an element's box inside the viewport, computed at once (no
    IntersectionObserver to wait for);
  - Chrome's node ids, frame ids and AX node ids change on every page load; they are renumbered
    in document order, so the same page in the same state gives equal objects (what Gymnasium's
    determinism check and a replayed trajectory need). Bids are never renumbered.
Bids follow BrowserGym's scheme: elements get numbers, iframes letters ("a", "b", ... "aA"),
and an element inside a frame carries the frame's bid as a prefix ("a12").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BID = "bid"

MARK_SCRIPT = """
([prefix, attr]) => {
  if (window.__pomonaBid === undefined) window.__pomonaBid = {next: 0, frames: 0};
  const ids = window.__pomonaBid;
  const frameId = (n) => {  // 0 -> 'a', 25 -> 'z', 26 -> 'aA', ... (a lower-case first letter)
    const upper = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
    let out = 'abcdefghijklmnopqrstuvwxyz'[n % 26];
    for (n = Math.floor(n / 26); n > 0; n = Math.floor((n - 1) / 26)) out += upper[(n - 1) % 26];
    return out;
  };
  const MARKABLE = new Set(['input', 'textarea', 'select', 'button', 'a', 'iframe', 'video',
                            'li', 'td', 'option']);
  const W = window.innerWidth, H = window.innerHeight;
  const seen = new Set(), props = {}, frames = [];
  const visit = (el) => {
    const tag = el.tagName.toLowerCase();
    let bid = el.getAttribute(attr);
    if (bid === null || seen.has(bid) || !bid.startsWith(prefix)) {
      const isFrame = tag === 'iframe' || tag === 'frame';
      bid = prefix + (isFrame ? frameId(ids.frames++) : String(ids.next++));
      el.setAttribute(attr, bid);
    }
    seen.add(bid);
    // live state into attributes, so the DOM snapshot shows what the page shows
    if (typeof el.value === 'string' && ['input', 'textarea', 'select', 'option'].includes(tag)) {
      if (el.getAttribute('value') !== el.value) el.setAttribute('value', el.value);
    }
    if (typeof el.checked === 'boolean') {
      if (el.checked) el.setAttribute('checked', ''); else el.removeAttribute('checked');
    }
    const r = el.getBoundingClientRect();
    const area = r.width * r.height;
    const inside = Math.max(0, Math.min(W, r.right) - Math.max(0, r.left)) *
                   Math.max(0, Math.min(H, r.bottom) - Math.max(0, r.top));
    const style = getComputedStyle(el);
    const shown = style.visibility !== 'hidden' && style.display !== 'none';
    const visibility = shown && area > 0 ? Math.round(inside / area * 100) / 100 : 0;
    const marked = shown && area > 0 && (MARKABLE.has(tag) || el.onclick !== null ||
      style.cursor === 'pointer' || el.hasAttribute('role') || el.isContentEditable);
    props[bid] = [visibility, marked];
    if (tag === 'iframe' || tag === 'frame') frames.push(bid);
  };
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      visit(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  let focused = document.activeElement;
  while (focused && focused.shadowRoot && focused.shadowRoot.activeElement)
    focused = focused.shadowRoot.activeElement;
  const focusedBid = focused && focused !== document.body ? focused.getAttribute(attr) || '' : '';
  return {props, frames, focused: focusedBid};
}
"""


@dataclass
class PageState:
    """One observation's BrowserGym-shaped parts."""

    dom_object: dict[str, Any]
    axtree_object: dict[str, Any]
    extra_element_properties: dict[str, dict[str, Any]]
    focused_element_bid: str = ""
    frames: list[str] = field(default_factory=list)


def mark(page: Any) -> tuple[dict[str, list[Any]], str]:
    """Give every element of every frame its bid. Returns {bid: [visibility, set_of_marks]}
    and the focused element's bid."""
    props: dict[str, list[Any]] = {}
    focused = ""

    def frame_walk(frame: Any, prefix: str) -> str:
        nonlocal focused
        found = frame.evaluate(MARK_SCRIPT, [prefix, BID])
        props.update(found["props"])
        inner_focus = found["focused"]
        for child in frame.child_frames:
            if child.is_detached():
                continue
            owner = child.frame_element()
            child_bid = owner.get_attribute(BID)
            owner.dispose()
            if child_bid:
                inside = frame_walk(child, child_bid)
                if inner_focus == child_bid and inside:
                    inner_focus = inside
        return str(inner_focus)

    focused = frame_walk(page.main_frame, "")
    return props, focused


def capture(page: Any, cdp: Any) -> PageState:
    """Mark the page, then read its DOM snapshot and accessibility tree (one CDP session)."""
    props, focused = mark(page)
    snapshot = cdp.send(
        "DOMSnapshot.captureSnapshot",
        {"computedStyles": [], "includeDOMRects": True, "includePaintOrder": True},
    )
    frames = _frame_ids(cdp.send("Page.getFrameTree")["frameTree"])
    trees = {f: cdp.send("Accessibility.getFullAXTree", {"frameId": f})["nodes"] for f in frames}
    bids = _bids_by_node(snapshot)
    axtree = _merge_axtrees(trees, snapshot, frames, bids)
    extra = _extra_properties(snapshot, props)
    renumber(snapshot, axtree)
    return PageState(snapshot, axtree, extra, focused, frames)


def _frame_ids(tree: dict[str, Any]) -> list[str]:
    out = [tree["frame"]["id"]]
    for child in tree.get("childFrames", []):
        out += _frame_ids(child)
    return out


def _attribute(snapshot: dict[str, Any], attributes: list[int], name: str) -> str | None:
    strings = snapshot["strings"]
    for i in range(0, len(attributes), 2):
        if strings[attributes[i]] == name:
            return str(strings[attributes[i + 1]])
    return None


def _bids_by_node(snapshot: dict[str, Any]) -> dict[int, str]:
    """{backendNodeId: bid} over every document of the snapshot."""
    out: dict[int, str] = {}
    for doc in snapshot["documents"]:
        nodes = doc["nodes"]
        for backend, attributes in zip(nodes["backendNodeId"], nodes["attributes"], strict=True):
            bid = _attribute(snapshot, attributes, BID)
            if bid is not None:
                out[backend] = bid
    return out


def _merge_axtrees(
    trees: dict[str, list[dict[str, Any]]],
    snapshot: dict[str, Any],
    frames: list[str],
    bids: dict[int, str],
) -> dict[str, Any]:
    """One tree: each frame's root hung under its iframe's node; bids on every node that has one.
    Which frame an iframe holds comes from the snapshot (its content document's frame)."""
    content_frame: dict[int, str] = {}
    docs = snapshot["documents"]
    for doc in docs:
        index = doc["nodes"].get("contentDocumentIndex", {"index": [], "value": []})
        for node, child in zip(index["index"], index["value"], strict=True):
            content_frame[doc["nodes"]["backendNodeId"][node]] = snapshot["strings"][
                docs[child]["frameId"]
            ]
    nodes: list[dict[str, Any]] = []
    roots = {f: trees[f][0]["nodeId"] for f in frames if trees.get(f)}
    for f in frames:
        for node in trees.get(f, []):
            backend = node.get("backendDOMNodeId")
            if backend in bids:
                node["browsergym_id"] = bids[backend]
            inner = content_frame.get(backend) if backend is not None else None
            if node.get("role", {}).get("value") == "Iframe" and inner in roots:
                node.setdefault("childIds", []).append(roots[inner])
            nodes.append(node)
    return {"nodes": nodes}


def _extra_properties(
    snapshot: dict[str, Any], props: dict[str, list[Any]]
) -> dict[str, dict[str, Any]]:
    """{bid: visibility, bbox (x, y, width, height in the page's viewport), clickable (Chrome
    sees a click handler), set_of_marks}, with frames' offsets added to their elements' boxes."""
    docs = snapshot["documents"]
    offset: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}
    out: dict[str, dict[str, Any]] = {}
    for d, doc in enumerate(docs):
        nodes, layout = doc["nodes"], doc["layout"]
        ox, oy = offset.get(d, (0.0, 0.0))
        ox, oy = ox - doc.get("scrollOffsetX", 0), oy - doc.get("scrollOffsetY", 0)
        bounds = {
            n: b
            for n, b, rects in zip(
                layout["nodeIndex"], layout["bounds"], layout["clientRects"], strict=True
            )
            if rects
        }
        index = nodes.get("contentDocumentIndex", {"index": [], "value": []})
        for node, child in zip(index["index"], index["value"], strict=True):
            box = bounds.get(node)
            if box:
                offset[child] = (ox + box[0], oy + box[1])
        clickable = set(nodes.get("isClickable", {}).get("index", []))
        for n, attributes in enumerate(nodes["attributes"]):
            bid = _attribute(snapshot, attributes, BID)
            if bid is None:
                continue
            box = bounds.get(n)
            visibility, som = props.get(bid, [0, False])
            out[bid] = {
                "visibility": float(visibility),
                "bbox": [box[0] + ox, box[1] + oy, box[2], box[3]] if box else None,
                "clickable": n in clickable,
                "set_of_marks": bool(som),
            }
    return out


def renumber(snapshot: dict[str, Any], axtree: dict[str, Any]) -> None:
    """Chrome's per-load ids, replaced in place by their order of appearance."""
    backend: dict[int, int] = {}
    for doc in snapshot["documents"]:
        ids = doc["nodes"]["backendNodeId"]
        for i, value in enumerate(ids):
            ids[i] = backend.setdefault(value, len(backend) + 1)
    frame_names: dict[str, str] = {}
    strings = snapshot["strings"]
    for doc in snapshot["documents"]:
        original = strings[doc["frameId"]]
        frame_names.setdefault(original, f"frame-{len(frame_names)}")
    for i, s in enumerate(strings):
        if s in frame_names:
            strings[i] = frame_names[s]
    node_ids: dict[str, str] = {}
    for node in axtree["nodes"]:
        node_ids.setdefault(node["nodeId"], str(len(node_ids) + 1))
    for node in axtree["nodes"]:
        node["nodeId"] = node_ids[node["nodeId"]]
        if "parentId" in node:
            node["parentId"] = node_ids.get(node["parentId"], node["parentId"])
        node["childIds"] = [node_ids.get(c, c) for c in node.get("childIds", [])]
        if "backendDOMNodeId" in node:
            node["backendDOMNodeId"] = backend.get(node["backendDOMNodeId"], 0)
        if "frameId" in node:
            node["frameId"] = frame_names.get(node["frameId"], node["frameId"])
