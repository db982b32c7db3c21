"""WebVoyager's action grammar: every form it accepts, whole model replies, and clear errors."""

from __future__ import annotations

import pytest

from pomona.browser_env.actions import Action, ActionError, parse


@pytest.mark.parametrize(("text", "expected"), [
    ("Click [5]", Action("click", 5)),
    ("click 12", Action("click", 12)),
    ("Type [3]; hello world", Action("type", 3, "hello world")),
    ("Type [3]; [hello]", Action("type", 3, "hello")),
    ("Type [3];", Action("type", 3, "")),
    ("Scroll [WINDOW]; down", Action("scroll", None, direction="down")),
    ("Scroll [7]; [up]", Action("scroll", 7, direction="up")),
    ("Wait", Action("wait")),
    ("GoBack", Action("goback")),
    ("Google", Action("google")),
    ("ANSWER; The price is $12.99", Action("answer", text="The price is $12.99")),
    ("ANSWER; [42]", Action("answer", text="42")),
])  # fmt: skip
def test_grammar(text: str, expected: Action) -> None:
    assert parse(text) == expected
    assert parse(str(expected)) == expected  # what str() writes parses back


def test_a_whole_reply_in_a_code_fence() -> None:
    reply = "```bash\nThought: the filter is there.\nAction: Click [4]\n```"
    assert parse(reply) == Action("click", 4)
    assert parse("Thought: done.\nAction: ANSWER; line one\nline two").text == "line one\nline two"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "Thought: nothing to do",
        "Action: Click [x]",
        "Hover [3]",
        "Scroll [3]; sideways",
        "Type hello",
    ],
)
def test_malformed_actions_say_what_the_grammar_is(bad: str) -> None:
    with pytest.raises(ActionError, match="Click \\[N\\]"):
        parse(bad)
