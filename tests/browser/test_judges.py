"""The judges' procedures and parsing, against recorded replies: what each call carries, how the
reply becomes a label, and the benchmarks' aggregation rules."""

from __future__ import annotations

from typing import Any

from pomona.benchmarks.browser import judges

SHOTS = [bytes([n]) * 8 for n in range(20)]


class Recorded:
    """A judge model that answers with recorded replies, in order, and keeps the requests."""

    def __init__(self, *replies: str):
        self.replies, self.calls = list(replies), []

    def __call__(self, messages: list[dict[str, Any]], **params: Any) -> str:
        self.calls.append((messages, params))
        return self.replies.pop(0)


def images(messages: list[dict[str, Any]]) -> int:
    return sum(
        p.get("type") == "image_url"
        for m in messages
        if isinstance(m["content"], list)
        for p in m["content"]
    )


def test_webvoyager_call_and_parsing() -> None:
    chat = Recorded("The cart shows the item.\nSUCCESS")
    verdict = judges.judge_webvoyager(chat, "add a kettle", "Done.", SHOTS)
    assert verdict["label"] == 1
    messages, params = chat.calls[0]
    assert params == {"temperature": 0, "seed": 42, "max_tokens": 1000}
    user = messages[1]["content"]
    assert user[0]["text"].startswith("TASK: add a kettle\nResult Response: Done.\n15 screenshots")
    assert images(messages) == 15  # the last k=15
    assert user[-1]["text"] == "Your verdict:\n"
    assert judges.parse_webvoyager("Not all parts done. NOT SUCCESS") == 0
    assert judges.parse_webvoyager("I cannot tell.") is None


def test_webvoyager_no_answer_scores_zero_without_a_call() -> None:
    chat = Recorded()
    assert judges.judge_webvoyager(chat, "task", None, SHOTS)["label"] == 0
    assert chat.calls == []


def test_deepshop_product_over_present_parts() -> None:
    row = {"attribute": "green kettle", "filter": "rated 4+", "sort": "None"}
    chat = Recorded("SUCCESS", "NOT SUCCESS")
    verdict = judges.judge_deepshop(chat, row, "Added.", SHOTS)
    assert [c[0][1]["content"][0]["text"].split("\n")[0] for c in chat.calls] == [
        "TASK: green kettle",
        "TASK: rated 4+",
    ]  # one call per present sub-query, none for sort
    assert verdict["parts"]["attribute"]["label"] == 1 and verdict["label"] == 0
    unjudged = judges.judge_deepshop(Recorded("SUCCESS", "no verdict"), row, "Added.", SHOTS)
    assert unjudged["label"] == 0  # a missing SUCCESS counts 0
    assert judges.judge_deepshop(Recorded(), row, None, SHOTS)["label"] == 0


def test_webjudge_three_stages() -> None:
    shots = SHOTS[:3]
    chat = Recorded(
        "**Key Points**: 1. green\n2. sort by price",
        "Shows the filter. Score: 4",
        "Unrelated page. Score: 1",
        "The cart has it. Score: 5",
        'Thoughts: all met.\nStatus: "success"',
    )
    verdict = judges.judge_webjudge(
        chat, "buy the cheapest green kettle", ["Click [3]", "Click [9]"], shots
    )
    assert verdict["label"] == 1 and verdict["key_points"] == "1. green\n2. sort by price"
    assert [r["Score"] for r in verdict["image_judge_record"]] == [4, 1, 5]
    assert chat.calls[0][0][1]["content"] == "Task: buy the cheapest green kettle"  # text only
    outcome = chat.calls[-1][0][1]["content"]
    assert images(chat.calls[-1][0]) == 2  # only screenshots scoring >= 3 are kept
    assert "1. Click [3]\n2. Click [9]" in outcome[0]["text"]
    assert "Shows the filter." in outcome[0]["text"] and "Unrelated" not in outcome[0]["text"]


def test_webjudge_outcome_parsing() -> None:
    assert judges.parse_outcome('Thoughts: x\nStatus: "failure"') == 0
    assert judges.parse_outcome("Thoughts: looks like success") == 0  # no status: a parse error
    assert judges.parse_outcome('STATUS: "Success"') == 1


def test_runner_history_holds_no_answer() -> None:
    chat = Recorded("Key Points: a", 'Status: "failure"')
    task = type("T", (), {"instruction": "t", "metadata": {}})()
    steps = [{"action": "Click [1]", "thought": "", "screenshot": 0}]
    judges.run_judge("mind2web-local", chat, task, "the answer is 7", steps, [])
    assert "the answer is 7" not in chat.calls[-1][0][1]["content"][0]["text"]


def test_users_prompt_files_replace_ours(tmp_path: Any) -> None:
    (tmp_path / "webvoyager_system.txt").write_text("THE BENCHMARK'S OWN PROMPT")
    prompts = judges.load_prompts(tmp_path)
    chat = Recorded("SUCCESS")
    judges.judge_webvoyager(chat, "t", "a", SHOTS[:1], prompts=prompts)
    assert chat.calls[0][0][0]["content"] == "THE BENCHMARK'S OWN PROMPT"
    assert prompts["webjudge_outcome"] == judges.PROMPTS["webjudge_outcome"]


def test_agreement() -> None:
    assert judges.agreement([(True, 1), (False, 0), (True, 0), (False, None)]) == 2 / 3
    assert judges.agreement([(True, None)]) is None
