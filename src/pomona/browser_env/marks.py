"""Set-of-marks: number the interactive elements in view, draw the numbers on the page for the
screenshot, and describe the same elements as text.

The labelling runs as one script in the page. Elements are taken in document order, so the same
page in the same state always gets the same numbers (what makes a recorded action sequence
replayable). An element counts when it is interactive (a link, a control, an ARIA widget, or
drawn with a pointer cursor), has a box inside the viewport, and is the top-most element at one
of its points (covered elements cannot be clicked, so they get no number).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

OVERLAY_ID = "__pomona_marks"

LABEL_SCRIPT = """
(() => {
  const OLD = document.getElementById('__OVERLAY__');
  if (OLD) OLD.remove();
  const W = window.innerWidth, H = window.innerHeight;
  const SELECTOR = 'a[href], button, input:not([type=hidden]), textarea, select, summary, ' +
    '[role=button], [role=link], [role=checkbox], [role=radio], [role=option], [role=tab], ' +
    '[role=menuitem], [role=textbox], [role=combobox], [onclick], [contenteditable=""], ' +
    '[contenteditable=true], [tabindex]:not([tabindex="-1"])';
  const found = [];
  const interactive = (el) => el.matches(SELECTOR) ||
    (getComputedStyle(el).cursor === 'pointer' &&
     !(el.parentElement && getComputedStyle(el.parentElement).cursor === 'pointer'));
  const all = document.body ? document.body.querySelectorAll('*') : [];
  for (const el of all) {
    if (!interactive(el)) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none' || +style.opacity === 0) continue;
    const r = el.getBoundingClientRect();
    const x0 = Math.max(0, r.left), y0 = Math.max(0, r.top);
    const x1 = Math.min(W, r.right), y1 = Math.min(H, r.bottom);
    if (x1 - x0 < 2 || y1 - y0 < 2) continue;
    const points = [[(x0 + x1) / 2, (y0 + y1) / 2], [x0 + 1, y0 + 1], [x1 - 1, y1 - 1]];
    const hit = points.some(([x, y]) => {
      const top = document.elementFromPoint(x, y);
      return top && (top === el || el.contains(top) || (top.control && top.control === el) ||
                     (el.labels && [...el.labels].some((l) => l.contains(top))));
    });
    if (!hit) continue;
    const labelled = el.labels && el.labels.length ? [...el.labels].map((l) => l.innerText).join(' ') : '';
    const field = ['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName);
    const own = field ? (['checkbox', 'radio'].includes(el.type) ? labelled : el.value) : el.innerText;
    const text = (own || labelled || el.getAttribute('aria-label') || el.getAttribute('title') ||
                  el.getAttribute('alt') || '').replace(/\\s+/g, ' ').trim().slice(0, 120);
    found.push({el, box: [x0, y0, x1 - x0, y1 - y0],
                tag: el.tagName.toLowerCase(), type: el.getAttribute('type') || '',
                role: el.getAttribute('role') || '', text,
                placeholder: el.getAttribute('placeholder') || '',
                checked: (el.type === 'checkbox' || el.type === 'radio') ? !!el.checked : null});
  }
  const marks = found;
  window.__pomonaMarks = marks.map((m) => m.el);
  const overlay = document.createElement('div');
  overlay.id = '__OVERLAY__';
  overlay.style.cssText = 'position:fixed;left:0;top:0;width:0;height:0;z-index:2147483647;' +
    'pointer-events:none';
  const colours = ['#e6194b', '#3cb44b', '#4363d8', '#f58231', '#911eb4', '#008080', '#9a6324'];
  marks.forEach((m, i) => {
    const c = colours[i % colours.length];
    const box = document.createElement('div');
    box.style.cssText = `position:fixed;left:${m.box[0]}px;top:${m.box[1]}px;` +
      `width:${m.box[2]}px;height:${m.box[3]}px;outline:2px dashed ${c};pointer-events:none`;
    const tag = document.createElement('span');
    tag.textContent = String(i);
    tag.style.cssText = `position:absolute;left:-2px;top:-16px;background:${c};color:#fff;` +
      'font:bold 12px/14px monospace;padding:0 3px;pointer-events:none';
    box.appendChild(tag);
    overlay.appendChild(box);
  });
  document.documentElement.appendChild(overlay);
  return marks.map(({el, ...rest}) => rest);
})()
""".replace("__OVERLAY__", OVERLAY_ID)

CLEAR_SCRIPT = (
    f"(() => {{ const o = document.getElementById('{OVERLAY_ID}'); if (o) o.remove(); }})()"
)


@dataclass(frozen=True)
class Mark:
    """One numbered element: its box in viewport pixels (x, y, width, height) and what it shows."""

    index: int
    tag: str
    box: tuple[float, float, float, float]
    text: str = ""
    type: str = ""
    role: str = ""
    placeholder: str = ""
    checked: bool | None = None

    @property
    def center(self) -> tuple[float, float]:
        x, y, w, h = self.box
        return x + w / 2, y + h / 2

    @property
    def typeable(self) -> bool:
        return self.tag in ("input", "textarea") or self.role in ("textbox", "combobox")

    def describe(self) -> str:
        """One line of the text view: `[3]: <input type=text> "Search recipes";`."""
        kind = self.tag
        if self.type:
            kind += f" type={self.type}"
        if self.role:
            kind += f" role={self.role}"
        label = self.text or self.placeholder
        state = "" if self.checked is None else (" (checked)" if self.checked else " (unchecked)")
        return f"[{self.index}]: <{kind}> {json.dumps(label)}{state};"


def parse_marks(raw: list[dict]) -> list[Mark]:
    return [
        Mark(i, m["tag"], tuple(m["box"]), m.get("text", ""), m.get("type", ""), m.get("role", ""),
             m.get("placeholder", ""), m.get("checked"))
        for i, m in enumerate(raw)
    ]  # fmt: skip


def text_view(marks: list[Mark]) -> str:
    return "\n".join(m.describe() for m in marks)
