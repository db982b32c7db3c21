"""The simulated user of a multi-turn Claw-Eval task: Claw-Eval's own UserAgent (its prompt, its
`[DONE]` rule), its model reached through the recording proxy from inside the sandbox, each
conversation recorded as a proxy episode with `role: simulated-user`.

The offline stand-in (`script` given, the model `scripted`) answers round N with the script's
Nth reply (then `[DONE]`): Claw-Eval's UserAgent sends each round as a fresh two-message request,
so the scripted model cannot count rounds from it; each round gets a proxy episode of its own
whose fixed answer is that reply. It is named as such in every episode it opens.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

KEY = "sk-pomona"
_opened: list[tuple[str, str]] = []  # (proxy, key) of every episode opened, closed at collect


def open_episode(spec: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A proxy episode opened from inside the sandbox (the gateway reaches only the proxy)."""
    body = {
        "model": spec["model"],
        "tool_less_calls": "main",
        "metadata": {**(spec.get("metadata") or {}), "role": "simulated-user"},
        **fields,
    }
    request = urllib.request.Request(
        f"{spec['proxy']}/episodes",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        episode = json.loads(r.read())
    _opened.append((spec["proxy"], episode["key"]))
    return episode


def close_all() -> list[str]:
    """Close every episode opened here (so each writes its `episodes` row); their keys."""
    keys = []
    while _opened:
        proxy, key = _opened.pop()
        request = urllib.request.Request(
            f"{proxy}/episodes/{key}/close",
            data=b"{}",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
            method="POST",
        )
        try:
            urllib.request.urlopen(request, timeout=60).close()
            keys.append(key)
        except OSError:
            pass
    return keys


def make_user(spec: dict[str, Any]) -> Any:
    """Claw-Eval's UserAgent for the spec's model, or the scripted stand-in built on it."""
    from claw_eval.runner.user_agent import UserAgent

    if spec.get("script") is None:
        episode = open_episode(spec)
        return UserAgent(model_id=spec["model"], api_key=KEY, base_url=episode["base_url"])

    class ScriptedRounds(UserAgent):
        """Claw-Eval's UserAgent, each round sent to an episode answering that round's reply."""

        def __init__(self) -> None:
            super().__init__(model_id="scripted", api_key=KEY, base_url="http://unused/v1")
            self.round = 0

        def generate_response(self, persona: str, conversation_messages: list[Any]) -> Any:
            from openai import OpenAI

            script = spec["script"]
            reply = script[self.round] if self.round < len(script) else "[DONE]"
            self.round += 1
            episode = open_episode(spec, script=[], final=reply)
            self.client = OpenAI(api_key=KEY, base_url=episode["base_url"])
            return super().generate_response(persona, conversation_messages)

    return ScriptedRounds()
