"""The local browser task sets, and their views in the official schemas.

One file of tasks (data/browser/tasks.jsonl) feeds three benchmarks:
  webvoyager-local  every task, in WebVoyager's schema (web_name, id, ques, web) with reference
                    answers in the shape of its reference_answer.json
  deepshop-local    the shop tasks, with DeepShop's attribute / filter / sort / category /
                    difficulty ("None" marks an absent component)
  mind2web-local    every task, in Online-Mind2Web's schema (task_id, website, confirmed_task,
                    reference_length, level)
Each task also carries its `plan` (the steps a person would take, by element text), the
`reference_actions` compiled from it (references.py) and the oracle's `expect` (oracle.py).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from pomona.benchmarks.browser.oracle import SiteOracle
from pomona.benchmarks.task import Environment, Task
from pomona.errors import Unknown

DATA = Path(__file__).resolve().parents[1] / "data" / "browser"
TASKS_FILE = DATA / "tasks.jsonl"
SHOP = "Pomona Market"
DEEPSHOP_FIELDS = ("attribute", "filter", "sort", "category", "difficulty")
BENCHMARKS = ("webvoyager-local", "deepshop-local", "mind2web-local")


@cache
def records(path: Path = TASKS_FILE) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(line) for line in path.read_text().splitlines() if line.strip())


def level(steps: int) -> str:
    """Online-Mind2Web's difficulty by the number of reference steps."""
    return "easy" if steps <= 4 else "medium" if steps <= 7 else "hard"


def webvoyager_row(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("web_name", "id", "ques", "web")}


def deepshop_row(r: dict[str, Any]) -> dict[str, Any]:
    return {**webvoyager_row(r), **{k: r.get(k, "None") for k in DEEPSHOP_FIELDS}}


def mind2web_row(r: dict[str, Any]) -> dict[str, Any]:
    steps = len(r.get("reference_actions") or r["plan"])
    return {
        "task_id": hashlib.md5(r["id"].encode()).hexdigest(),
        "website": r["web"],
        "confirmed_task": r["ques"],
        "reference_length": steps,
        "level": level(steps),
    }


def reference_answers(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """WebVoyager's reference_answer.json shape: {web_name: {notice, answers: [{id, type, ans}]}}."""
    out: dict[str, Any] = {}
    for r in rows:
        site = out.setdefault(r["web_name"], {"notice": "", "answers": []})
        expect = r["expect"]
        if "answer" in expect:
            ans = "; ".join(" / ".join(group) for group in expect["answer"])
            kind = "golden"
        else:
            ans = f"cart holds {expect.get('cart')}"
            kind = "possible"
        site["answers"].append({"id": int(r["id"].rsplit("--", 1)[1]), "type": kind, "ans": ans})
    return out


def task_of(r: dict[str, Any], benchmark: str) -> Task:
    meta = {**r, "webvoyager": webvoyager_row(r), "mind2web": mind2web_row(r)}
    if r["web_name"] == SHOP:
        meta["deepshop"] = deepshop_row(r)
    actions = r.get("reference_actions")
    return Task(
        id=r["id"],
        instruction=r["ques"],
        scorer=SiteOracle(),
        environment=Environment(image="host", workdir="/workspace", browser=True),
        solution=tuple(actions) if actions else None,
        benchmark=benchmark,
        metadata=meta,
    )


def load(benchmark: str) -> list[Task]:
    if benchmark not in BENCHMARKS:
        raise Unknown(f"unknown browser benchmark {benchmark!r}; choose {', '.join(BENCHMARKS)}")
    rows = records()
    if benchmark == "deepshop-local":
        rows = tuple(r for r in rows if r["web_name"] == SHOP)
    return [task_of(r, benchmark) for r in rows]
