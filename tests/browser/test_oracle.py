"""The site oracle over state logs: answers, carts, applied filters and sorting, pages seen."""

from __future__ import annotations

from pomona.benchmarks.browser import oracle, tasks

LOG = [
    {"seq": 1, "event": "ready"},
    {
        "seq": 2,
        "site": "shop",
        "method": "GET",
        "path": "/search",
        "status": 200,
        "query": {"q": "kettle", "color": "green"},
    },
    {
        "seq": 3,
        "site": "shop",
        "method": "GET",
        "path": "/search",
        "status": 200,
        "query": {"q": "kettle", "color": "green", "sort": "price-asc"},
    },
    {
        "seq": 4,
        "site": "shop",
        "method": "GET",
        "path": "/product/P030",
        "status": 200,
        "query": {},
    },
    {"seq": 5, "site": "shop", "event": "cart", "cart": {"P030": 1}},
]


def passed(expect: dict, answer: str | None, log: list) -> bool:
    return all(c.passed for c in oracle.checks(expect, answer, log))


def test_numbers_must_stand_alone() -> None:
    assert oracle.mentions("It costs $83.99.", "83.99")
    assert not oracle.mentions("It costs $183.99", "83.99")
    assert not oracle.mentions("45 minutes", "4") and oracle.mentions("serves 4 people", "4")


def test_answer_groups() -> None:
    expect = {"answer": [["walpole"], ["1754"]]}
    assert passed(expect, "Horace Walpole coined it in 1754.", [])
    assert not passed(expect, "Horace Walpole.", [])
    assert not passed(expect, None, [])


def test_cart_listing_and_pages() -> None:
    expect = {
        "cart": {"P030": 1},
        "listing": {"site": "shop", "query": {"color": "green", "sort": "price-asc"}},
        "visited": [["shop", "/product/P030"]],
    }
    assert passed(expect, None, LOG)
    assert not passed({**expect, "cart": {"P030": 2}}, None, LOG)
    assert not passed(expect, None, LOG[:3])  # never opened the product, cart empty
    apart = [LOG[1], {**LOG[2], "query": {"q": "kettle", "sort": "price-asc"}}]
    assert not passed({"listing": expect["listing"]}, None, apart)  # filter and sort never together


def test_task_views_follow_the_official_schemas() -> None:
    rows = tasks.records()
    assert len(rows) >= 30 and len({r["id"] for r in rows}) == len(rows)
    shop = [t for t in tasks.load("deepshop-local")]
    assert shop and all(
        set(t.metadata["deepshop"])
        == {
            "web_name",
            "id",
            "ques",
            "web",
            "attribute",
            "filter",
            "sort",
            "category",
            "difficulty",
        }
        for t in shop
    )
    m2w = tasks.load("mind2web-local")[0].metadata["mind2web"]
    assert len(m2w["task_id"]) == 32 and m2w["level"] in ("easy", "medium", "hard")
    assert m2w["reference_length"] == len(tasks.records()[0]["reference_actions"])
    answers = tasks.reference_answers(list(rows))
    assert {a["type"] for site in answers.values() for a in site["answers"]} <= {
        "golden",
        "possible",
    }
