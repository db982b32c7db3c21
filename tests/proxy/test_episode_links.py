"""One way to open an episode, whichever way the proxy is reached: `ProxyServer.open_episode`
takes exactly the fields of `POST /episodes`, so the callers that open episodes (the claw judge,
an attempt of the episode engine) send one set of fields through the in-process ProxyServer or
a RemoteProxy."""

from __future__ import annotations

import inspect
import json

import openai
from proxy_helpers import calls

from pomona.benchmarks.claw.judge import JudgeSpec, open_judge
from pomona.benchmarks.task import Task
from pomona.episodes.attempt import Attempt, RunInfo
from pomona.proxy.control import RemoteProxy
from pomona.proxy.schemas import EpisodeSpec


def test_in_process_opening_takes_exactly_the_http_fields():
    from pomona.proxy import ProxyServer

    params = set(inspect.signature(ProxyServer.open_episode).parameters) - {"self", "policy"}
    assert params == set(EpisodeSpec.model_fields)


def test_the_claw_judge_and_an_attempt_over_either_link(proxy, runs):
    task = Task("t1", "find it", scorer=None, benchmark="webvoyager-local")  # type: ignore[arg-type]
    for link in (proxy, RemoteProxy(proxy.url)):
        judge = open_judge(link, JudgeSpec(verdict=0.25), "claw-eval", of="judged", task="t1")
        client = openai.OpenAI(base_url=judge["base_url"], api_key="sk-x")
        for _ in range(2):  # the stand-in gives its verdict to every call of the trial
            said = client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "judge this"}]
            )
            assert json.loads(said.choices[0].message.content or "{}")["score"] == 0.25
        attempt = Attempt(task, "webvoyager", "1", "oracle", link, RunInfo("r1"))
        script = ["Thought: look.\nAction: ANSWER; 42"]
        ep = attempt.open("scripted", script, tool_less_calls="main")
        reply = openai.OpenAI(base_url=ep["base_url"], api_key="sk-x").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "the page"}]
        )
        assert "ANSWER; 42" in (reply.choices[0].message.content or "")
    rows = calls(runs, 6)
    # tool-less requests of judges and of WebVoyager are their turns, not side calls, either way
    turns = [(r["side"], r["sequence"], r["status"]) for r in rows]
    assert turns == [(False, 0, "ok"), (False, 1, "ok"), (False, 0, "ok")] * 2
    # each call names what its episode was opened as (a judge's episode is in no run)
    opened_as = [(r["run"], r["benchmark"], r["task"], r["harness"]) for r in rows]
    judged = (None, None, None, None)
    assert opened_as == [judged, judged, ("r1", task.benchmark, "t1", "webvoyager")] * 2
