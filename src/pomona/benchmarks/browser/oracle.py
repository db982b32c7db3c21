"""The programmatic grader of the local sites: reads the site's state log and the agent's answer
and checks the task's expectations. It is the ground truth the LLM judges are compared with.

A task's `expect` may hold:
  answer   [[alternative, ...], ...]   every group needs one alternative in the answer
           (case-insensitive; a number must stand alone, so "4" does not match "45")
  cart     {product id: quantity}      the shop's cart at the end, exactly
  listing  {site, query: {k: v}}       some results page showed all these parameters at once
  visited  [[site, path], ...]         pages the agent opened
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pomona.benchmarks.task import Score


def normalize(text: str) -> str:
    return " ".join(text.lower().replace("\u2019", "'").split())


def mentions(answer: str, expected: str) -> bool:
    a, e = normalize(answer), normalize(expected)
    if re.fullmatch(r"[\d.]+", e):
        return re.search(rf"(?<![\d.]){re.escape(e)}(?![\d]|\.\d)", a) is not None
    return e in a


def final_cart(state: list[dict[str, Any]]) -> dict[str, int]:
    carts = [e["cart"] for e in state if e.get("event") == "cart"]
    return carts[-1] if carts else {}


def pages(state: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in state if e.get("method") == "GET" and e.get("status") == 200]


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def checks(expect: dict[str, Any], answer: str | None, state: list[dict[str, Any]]) -> list[Check]:
    out: list[Check] = []
    if "answer" in expect:
        text = answer or ""
        missing = [g for g in expect["answer"] if not any(mentions(text, alt) for alt in g)]
        out.append(
            Check(
                "answer",
                answer is not None and not missing,
                "no answer given"
                if answer is None
                else f"missing {missing}"
                if missing
                else "all parts present",
            )
        )
    if "cart" in expect:
        cart = final_cart(state)
        out.append(Check("cart", cart == expect["cart"], f"cart {cart}, expected {expect['cart']}"))
    if "listing" in expect:
        want = expect["listing"]
        shown = [
            e["query"] for e in pages(state) if e["site"] == want["site"] and e["path"] == "/search"
        ]
        hit = any(all(q.get(k) == v for k, v in want["query"].items()) for q in shown)
        out.append(
            Check(
                "listing",
                hit,
                f"a {want['site']} results page with {want['query']}"
                + ("" if hit else f" was never shown (saw {shown[-3:]})"),
            )
        )
    for site, path in expect.get("visited", []):
        seen = any(e["site"] == site and e["path"] == path for e in pages(state))
        out.append(Check("visited", seen, f"{site}{path} {'opened' if seen else 'never opened'}"))
    return out


@dataclass(frozen=True)
class SiteOracle:
    """Scorer of the local-site tasks: collect the state log, then check it and the answer."""

    def collect(self, task: Any, session: Any) -> dict[str, Any]:
        from pomona.benchmarks.browser.web import read_state

        return {"state": read_state(session.sandbox)}

    def score(self, task: Any, artifacts: dict[str, Any]) -> Score:
        results = checks(task.metadata["expect"], artifacts.get("answer"), artifacts["state"])
        passed = bool(results) and all(c.passed for c in results)
        return Score(
            reward=1.0 if passed else 0.0,
            resolved=passed,
            details={"checks": [c.__dict__ for c in results], "answer": artifacts.get("answer")},
        )
