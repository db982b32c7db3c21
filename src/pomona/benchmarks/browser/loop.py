"""The WebVoyager agent loop, the browser benchmarks' built-in agent (not a CLI harness: it
drives the session directly, so it lives with the benchmarks, above browser_env): each turn the
model sees the task, a set-of-marks screenshot and the numbered elements, and replies
`Thought: ...` then `Action: ...` in WebVoyager's grammar; the loop carries the action out in
the sandboxed browser.

It follows WebVoyager's procedure (vision messages, at most 15 turns, only the last 3 screenshots
kept in the context, a format error answered with a reminder rather than an action, the episode
ending on `ANSWER`), and its first user message keeps the shape WebVoyager's own evaluator reads
back (`Now given a task: ... Please interact with ...`). The wording of the prompts is Pomona's.
Every model call goes to an OpenAI-compatible base URL: the recording proxy's episode URL.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from pomona.browser_env import actions
from pomona.browser_env.errors import ActionError
from pomona.browser_env.session import BrowserSession, Observation
from pomona.errors import EpisodeFailure, FailureKind
from pomona.harnesses.base import API_KEY

NAME = "webvoyager"
VERSION = "pomona-1"

SYSTEM_PROMPT = """You operate a web browser to complete a task for a user, one action per turn.

Each turn you receive a screenshot of the browser window. Every element you can act on has a
coloured dashed box with a number at its top-left corner; the same numbers are listed below the
screenshot with each element's tag and text.

Reply in exactly this format:
Thought: what you see, what is still missing, and what you will do next.
Action: one action from this list
  Click [N]                   click element N (a link, button, checkbox, tab ...)
  Type [N]; text              clear text field N, type the text, then press Enter
  Scroll [N or WINDOW]; down  scroll element N or the whole window (up or down)
  Wait                        wait a few seconds for the page
  GoBack                      return to the previous page
  Google                      open the search engine's start page
  ANSWER; text                finish, with the answer or a short report of what you did

Rules: give one action per reply and nothing after it; use the numbers of the latest screenshot
only; do not repeat an action that had no effect; when the task asks for an item with certain
properties, apply the site's filters and sorting rather than guessing; answer as soon as the task
is done, and answer even when the task was an errand (say what you did)."""

FIRST_TURN = "Now given a task: {task} Please interact with {web} and get the answer.\n"
OBSERVATION = (
    "Observation: the screenshot is attached. The page is {url}. Numbered elements:\n{elements}\n"
    "Give your Thought and Action."
)
FORMAT_REMINDER = (
    "Your reply had no usable action ({error}). Reply with `Thought:` and then `Action:` "
    "followed by exactly one action."
)
ACTION_FAILED = "The action could not be carried out: {error}. "
OMITTED = "[screenshot omitted: only the last {n} are kept]"


class AgentFailure(EpisodeFailure, RuntimeError):
    """The model could not be reached or answered with an error: `kind` is `proxy` or `upstream`."""

    def __init__(self, kind: FailureKind, message: str):
        super().__init__(message, kind)


@dataclass
class AgentResult:
    messages: list[dict[str, Any]] = field(default_factory=list)  # as last sent, plus the reply
    screenshots: list[bytes] = field(default_factory=list)  # one per observation, in order
    # the actions carried out (never the answer): {action, thought, screenshot (index acted on)}
    steps: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    turns: int = 0


def image_part(png: bytes) -> dict[str, Any]:
    data = base64.b64encode(png).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def thought_of(reply: str) -> str:
    text = reply.replace("```bash", "").replace("```", "")
    if "Thought:" in text:
        text = text.split("Thought:", 1)[1]
    return text.split("Action:", 1)[0].strip()


def chat(
    base_url: str,
    model: str,
    messages: list[dict[str, Any]],
    *,
    timeout: float = 300,
    retries: int = 3,
    **params: Any,
) -> str:
    """One chat completion's text. Overload and server errors are retried; what remains is an
    AgentFailure typed `proxy` (unreachable) or `upstream` (answered with an error)."""
    body = {"model": model, "messages": messages, **params}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    for attempt in range(retries):
        try:
            r = httpx.post(
                f"{base_url}/chat/completions", json=body, headers=headers, timeout=timeout
            )
        except httpx.HTTPError as e:
            if attempt + 1 < retries:
                time.sleep(1 + attempt)
                continue
            raise AgentFailure("proxy", f"the model endpoint could not be reached: {e!r}") from e
        if r.status_code in (429, 500, 502, 503, 504) and attempt + 1 < retries:
            time.sleep(1 + attempt)
            continue
        if r.status_code != 200:
            raise AgentFailure(
                "upstream", f"the model call failed with {r.status_code}: {r.text[:300]}"
            )
        try:
            content = r.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise AgentFailure(
                "upstream", f"the model's answer has no message: {r.text[:300]}"
            ) from e
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content or ""
    raise AssertionError("unreachable")


@dataclass
class WebVoyagerAgent:
    base_url: str  # OpenAI-compatible, with /v1
    model: str
    max_iter: int = 15
    keep_screenshots: int = 3
    temperature: float = 1.0
    max_tokens: int = 1000
    system_prompt: str = SYSTEM_PROMPT  # or the benchmark's own (WebVoyager's prompts.py)

    def _observation(self, obs: Observation, prefix: str = "") -> dict[str, Any]:
        text = prefix + OBSERVATION.format(url=obs.url, elements=obs.text or "(none)")
        return {
            "role": "user",
            "content": [{"type": "text", "text": text}, image_part(obs.screenshot)],
        }

    def _clip(self, messages: list[dict[str, Any]]) -> None:
        """Keep the images of the last `keep_screenshots` observations; older ones become a note."""
        with_images = [
            m
            for m in messages
            if isinstance(m["content"], list)
            and any(p.get("type") == "image_url" for p in m["content"])
        ]
        for m in with_images[: -self.keep_screenshots]:
            texts = [p for p in m["content"] if p.get("type") == "text"]
            m["content"] = [
                *texts,
                {"type": "text", "text": OMITTED.format(n=self.keep_screenshots)},
            ]

    def run(
        self, session: BrowserSession, instruction: str, web: str, ended: Any = lambda: False
    ) -> AgentResult:
        """Play one episode from the page the session shows now. `ended()` says whether the page
        itself finished the episode (MiniWoB). Browser failures propagate (they are infra)."""
        out = AgentResult()
        obs = session.observe()
        out.screenshots.append(obs.screenshot)
        first = self._observation(obs, FIRST_TURN.format(task=instruction, web=web))
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt}, first]
        for _ in range(self.max_iter):
            self._clip(messages)
            reply = chat(
                self.base_url,
                self.model,
                messages,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
            )
            out.turns += 1
            messages.append({"role": "assistant", "content": reply})
            try:
                action = actions.parse(reply)
            except ActionError as e:
                messages.append({"role": "user", "content": FORMAT_REMINDER.format(error=e)})
                continue
            if action.kind == "answer":
                out.answer = action.text
                break
            prefix = ""
            try:
                session.act(action, obs.marks)
                out.steps.append(
                    {
                        "action": str(action),
                        "thought": thought_of(reply),
                        "screenshot": len(out.screenshots) - 1,
                    }
                )
            except ActionError as e:
                prefix = ACTION_FAILED.format(error=e)
            if ended():
                break
            obs = session.observe()
            out.screenshots.append(obs.screenshot)
            messages.append(self._observation(obs, prefix))
        out.messages = messages
        return out
