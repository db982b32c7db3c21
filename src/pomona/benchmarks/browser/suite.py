"""Every browser task, whatever its benchmark, through one interface the env and the runner use:
which web its sandbox serves, how an episode begins and ends, how it is graded, and what the
oracle does.

    miniwob            MiniWoB++'s sampled tasks (miniwob.py), graded by the page's own reward
    webvoyager-local   the local sites' tasks (tasks.py), graded by the site oracle (oracle.py)
    deepshop-local     the shop's tasks
    mind2web-local     the local sites' tasks in Online-Mind2Web's schema
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pomona.benchmarks.browser import miniwob, tasks
from pomona.benchmarks.browser.web import LocalWeb
from pomona.benchmarks.task import Score, Task
from pomona.browser_env.chromium import LOCAL_DOMAIN
from pomona.browser_env.errors import BrowserCrashed, NavigationFailed
from pomona.browser_env.marks import Mark
from pomona.errors import EpisodeFailure

BENCHMARKS = ("miniwob", *tasks.BENCHMARKS)


def load(benchmark: str) -> list[Task]:
    if benchmark == "miniwob":
        return miniwob.tasks()
    return tasks.load(benchmark)


def is_miniwob(task: Task) -> bool:
    return "miniwob" in task.metadata


def stateless(task: Task) -> bool:
    """Whether the task's pages keep no server state (MiniWoB, the hazards and widgets sites), so
    one browser may serve its episode after another's."""
    host = urlsplit(str(task.metadata.get("web", ""))).hostname or ""
    return is_miniwob(task) or host in (f"hazards.{LOCAL_DOMAIN}", f"widgets.{LOCAL_DOMAIN}")


def web_for(task: Task) -> LocalWeb:
    return LocalWeb(miniwob=is_miniwob(task))


def allowed(task: Task) -> tuple[str, ...]:
    """The origins the agent may go to: MiniWoB's own pages, the local web, or (an official set
    on the live web) any http(s) origin."""
    if task.metadata.get("official"):
        return ()
    if is_miniwob(task):
        return (f"http://miniwob.{LOCAL_DOMAIN}",)
    return (f"http://*.{LOCAL_DOMAIN}",)


def begin(session: Any, task: Task, seed: int) -> str:
    """Open the task's start page (drawing MiniWoB's instance) and return the instruction."""
    session.allowed = allowed(task)
    if is_miniwob(task):
        return miniwob.begin(session, task, seed)
    try:
        session.goto(task.metadata["web"])
    except NavigationFailed as e:  # the task's own start page: the environment failed
        raise BrowserCrashed(f"the task's start page {task.metadata['web']} failed: {e}") from e
    return task.instruction


def ended(session: Any, task: Task) -> bool:
    """Whether the page itself ended the episode (MiniWoB does; the sites wait for an answer)."""
    return is_miniwob(task) and miniwob.ended(session)


def grade(session: Any, task: Task, answer: str | None) -> Score:
    artifacts = task.scorer.collect(task, session)  # a browser task's scorer reads the session
    return task.scorer.score(task, {**artifacts, "answer": answer})


def oracle_actions(task: Task, instruction: str, marks: list[Mark]) -> list[str]:
    """The reference action sequence: recorded for the sites, solved per instance for MiniWoB."""
    if is_miniwob(task):
        return miniwob.solve(task, instruction, marks)
    if task.solution is None:
        raise EpisodeFailure(
            f"task {task.id} has no reference actions (python -m pomona.gym.browser_references)"
        )
    return list(task.solution)
