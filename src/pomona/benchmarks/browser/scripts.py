"""What an agent is told and what the oracle says on a browser task: the prompt a harness that
browses through the MCP tools gets, the oracle's replies (the reference actions as the WebVoyager
loop's turns, or as the scripted model's MCP tool calls), and how a harness's last message
becomes the answer."""

from __future__ import annotations

import contextlib
import json
import re

from pomona.browser_env import actions
from pomona.browser_env.tools import SERVER_NAME, tool_call_of

HARNESS_PROMPT = """{task}

Do this in the web browser you are given through the `{server}` tools; {web} is already open in
it. `browser_observe` shows the page: a screenshot in which every element you can act on has a
numbered box, and the same numbers listed with each element's text. `browser_click`,
`browser_type`, `browser_scroll`, `browser_go_back`, `browser_search` and `browser_wait` act on
the page by those numbers and show the page as it is afterwards. Work only through the browser
tools. When you are done, reply with the answer (for an errand, say what you did) as your final
message."""


def harness_prompt(instruction: str, web: str) -> str:
    return HARNESS_PROMPT.format(task=instruction, web=web, server=SERVER_NAME)


def oracle_reply(action: str) -> str:
    """One reference action as a WebVoyager-loop turn."""
    return f"Thought: the reference plan's next step.\nAction: {action}"


def oracle_tool_steps(reference: list[str]) -> list[str]:
    """The reference actions as the scripted model's MCP tool calls, ending in the answer."""
    steps, answer = [], "Done."
    for line in reference:
        action = actions.parse(line)
        if action.kind == "answer":
            answer = action.text
            break
        name, arguments = tool_call_of(action)
        steps.append(json.dumps({"tool": name, "server": SERVER_NAME, "arguments": arguments}))
    return [*steps, json.dumps({"text": answer})]


def final_answer(text: str | None) -> str | None:
    """A harness's last message as the answer; a WebVoyager-style `ANSWER;` lead is dropped."""
    if text is None:
        return None
    if re.match(r"answer\b", actions.action_line(text), re.I):
        with contextlib.suppress(actions.ActionError):
            return actions.parse(text).text
    return text.strip()
