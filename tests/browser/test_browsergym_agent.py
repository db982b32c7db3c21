"""An agent written for BrowserGym runs on pomona/BrowserEnv-v0 with only its gym.make line
changed: BrowserGym's own code (browsergym-core 0.14.3, in its own venv built by
perf/browsergym_venv.sh, which ./dev setup runs) reads Pomona's observations with the demo
agent's obs_preprocessor (flatten_axtree_to_str, prune_html(flatten_dom_to_str)), a scripted
model answers in the demo agent's format (reasoning, then ```click("12")```), the demo agent's
action set (HighLevelActionSet(subsets=["chat", "tab", "nav", "bid", "infeas"], strict=False,
multiaction=False)) parses each reply, and Pomona carries the same string out. MiniWoB tasks are
solved with reward 1. Also: Pomona's action parser reads every action string as BrowserGym's
does."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import pomona  # noqa: F401 - registers the envs
from pomona.browser_env import highlevel

VENV = Path("/var/cache/pomona/browsergym-venv/bin/python")

AGENT = r'''
import json, re, sys
from browsergym.core.action.highlevel import HighLevelActionSet
from browsergym.utils.obs import flatten_axtree_to_str, flatten_dom_to_str, prune_html

# demo_agent/agent.py's action set and obs_preprocessor
action_set = HighLevelActionSet(subsets=["chat", "tab", "nav", "bid", "infeas"], strict=False,
                                multiaction=False, demo_mode="off")

def preprocess(obs):
    return {"goal_object": obs["goal_object"], "last_action_error": obs["last_action_error"],
            "axtree_txt": flatten_axtree_to_str(obs["axtree_object"]),
            "pruned_html": prune_html(flatten_dom_to_str(obs["dom_object"]))}

def bid_of(axtree, role, name):
    for line in axtree.splitlines():
        m = re.match(r"\s*\[(\w+)\] " + role + " " + re.escape(repr(name)), line)
        if m:
            return m.group(1)
    raise LookupError(f"no {role} {name!r} in {axtree}")

def model(goal, seen, done):
    """A scripted stand-in for the demo agent's LLM: it reads the task and the page as the
    demo agent's prompt shows them and answers in the demo agent's format."""
    quoted = re.findall(r'"([^"]*)"', goal)
    if goal.startswith("Click on the") and "button" in goal:
        return f'I will click the button, bid {bid_of(seen, "button", quoted[0])}.\n```click("{bid_of(seen, "button", quoted[0])}")```'
    if goal.startswith("Enter") and not done:
        field = re.search(r"\[(\w+)\] textbox", seen).group(1)
        return f'First I type the text.\n```fill("{field}", {json.dumps(quoted[0])})```'
    if goal.startswith("Select"):
        wanted = re.match(r"Select (.*) and click Submit", goal).group(1)
        names = [] if wanted == "nothing" else wanted.split(", ")
        todo = [n for n in names if n not in done]
        if todo:
            return f'```click("{bid_of(seen, "checkbox", todo[0])}")```'
    return f'Now I submit.\n```click("{bid_of(seen, "button", "Submit")}")```'

for line in sys.stdin:
    request = json.loads(line)
    if "parse" in request:  # BrowserGym's own parsing of an action string
        try:
            code = HighLevelActionSet(multiaction=True).to_python_code(request["parse"])
            calls = [l for l in code.splitlines() if re.match(r"^\w+\(", l)]
            print(json.dumps({"calls": calls}), flush=True)
        except Exception as e:
            print(json.dumps({"error": type(e).__name__}), flush=True)
        continue
    seen = preprocess(request["obs"])
    reply = model(request["obs"]["goal"], seen["axtree_txt"], request["done"])
    action_set.to_python_code(reply)  # raises unless BrowserGym accepts the reply
    print(json.dumps({"action": reply, "html": seen["pruned_html"]}), flush=True)
'''


@pytest.fixture(scope="module")
def agent() -> Iterator[Any]:
    if not VENV.exists():
        pytest.skip(f"BrowserGym's venv is missing ({VENV}): ./dev setup builds it")
    proc = subprocess.Popen(
        [str(VENV), "-c", AGENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        answer = proc.stdout.readline()
        assert answer, "BrowserGym's side exited"
        return dict(json.loads(answer))

    yield ask
    proc.kill()
    proc.wait()


def as_json(obs: dict[str, Any]) -> dict[str, Any]:
    keys = ("goal", "goal_object", "axtree_object", "dom_object", "last_action_error")
    return {k: obs[k] for k in keys}


@pytest.mark.parametrize("name", ["click-button", "enter-text", "click-checkboxes"])
def test_the_demo_agents_parsing_drives_pomona(name: str, agent: Any, browser_state: str) -> None:
    # BrowserGym: gym.make("browsergym/miniwob.click-button"); the only line that changes
    env = gym.make(
        "pomona/BrowserEnv-v0", task=f"miniwob/{name}", interface="browsergym",
        state_dir=browser_state,
    )  # fmt: skip
    try:
        obs, info = env.reset(seed=3)
        done: list[str] = []
        for _ in range(6):
            answer = agent({"obs": as_json(obs), "done": done})
            assert "bid=" in answer["html"]  # prune_html kept the bids
            obs, reward, terminated, truncated, info = env.step(answer["action"])
            assert obs["last_action_error"] == "", obs["last_action_error"]
            assert obs["last_action"] == answer["action"]
            done.append(answer["action"])
            if name == "click-checkboxes":  # the names clicked so far
                done = [line.split("'")[1] for line in obs["axtree_txt"].splitlines()
                        if "checkbox" in line and "checked" in line and "checked='false'" not in line]  # fmt: skip
            if terminated or truncated:
                break
        assert terminated and reward == 1.0 and info["failure"] == "none", info
    finally:
        env.close()


ACTIONS = [
    'click("12")',
    "I will click it.\n```click('a51', button=\"right\", modifiers=['Shift'])```",
    'fill("4", "multi-line\\nwith \\"quotes\\"")  # and a comment click("9")',
    'select_option("a48", ["red", "green"])',
    "# nothing here: click('3')\nnoop(500)",
    "scroll(0, -200.5)\ngoto('http://shop.pomona.test/')",
    'send_msg_to_user("The price is 12.99 (USD).")',
    "tab_focus(2) tab_close()",
    "Thoughts only, and no call at all.",
    "click(bid='7')",
]


def test_actions_parse_as_browsergym_parses_them(agent: Any) -> None:
    for text in ACTIONS:
        theirs = agent({"parse": text})
        try:
            mine = [str(c) for c in highlevel.parse(text)]
        except Exception as e:  # noqa: BLE001
            mine = [type(e).__name__]
        if "error" in theirs:
            assert mine == [], (text, theirs, mine)
            continue
        assert len(mine) == len(theirs["calls"]), (text, theirs, mine)
        for m, t in zip(mine, theirs["calls"], strict=True):
            assert m.split("(")[0] == t.split("(")[0], (text, m, t)
            assert eval(m, {}, _calls()) == eval(t, {}, _calls()), (text, m, t)  # noqa: S307


def _calls() -> dict[str, Any]:
    """Every action name as a function returning its arguments, to compare calls by value."""
    names = {n for subset in highlevel.SUBSETS.values() for n in subset} | {"noop"}
    return {n: (lambda *a, **k: (a, k)) for n in names}
