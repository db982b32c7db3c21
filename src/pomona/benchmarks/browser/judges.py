"""The browser benchmarks' LLM judges: their procedures and output parsing, with Pomona's own
prompt wording (or the benchmark's own prompt files, for numbers comparable with published ones).

    webvoyager  one call over the last k screenshots (k=15 in run_eval.sh), temperature 0, seed 42;
                "NOT SUCCESS" -> 0, else "SUCCESS" -> 1, else unjudged; no answer -> 0, no call
    webjudge    Online-Mind2Web: key points (text only), a 1-5 score per screenshot (kept at >= 3,
                at most 50), then the outcome over the task, key points, factual action history
                and the kept images' reasons; 1 iff "success" follows "status:", else 0
    deepshop    three WebVoyager-style calls, one per present sub-query (attribute, filter,
                sort); no answer or no SUCCESS -> 0; overall = product of the present labels

Calls go to any OpenAI-compatible endpoint (`chat` from the WebVoyager loop); in `pomona run`
that is a proxy episode of its own, so judge calls are recorded like agent calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.browser.loop import image_part

Chat = Callable[..., str]  # chat(messages, **params) -> text

PROMPTS: dict[str, str] = {
    "webvoyager_system": (
        "You grade whether a web agent completed a task. You get the task, the agent's final "
        "response, and the last screenshots of its browser. Judge only from what these show: "
        "assume nothing that is not visible or stated. If the task has several parts, every part "
        "must be done. When the response contradicts the screenshots, believe the screenshots; "
        "when the response states something the screenshots do not show, you may accept it. "
        "Explain briefly, then end with exactly SUCCESS or NOT SUCCESS."
    ),
    "webjudge_key_points": (
        "List the requirements a web agent must meet to complete the task below, one per line, "
        "under the heading 'Key Points:'. Keep each requirement as stated; a superlative "
        "('cheapest', 'best rated', 'latest') becomes a requirement to sort or filter by it."
    ),
    "webjudge_image": (
        "You see one screenshot from a web agent's attempt at a task, with the task's key points. "
        "Say what in the screenshot bears on the key points, then rate how much it helps decide "
        "whether the task was done, as 'Score: N' with N from 1 (nothing) to 5 (decisive)."
    ),
    "webjudge_outcome": (
        "You decide whether a web agent completed a task, from the task, its key points, the "
        "agent's actions and the most relevant screenshots with notes. Rules: requested filters "
        "must be visibly applied; numeric ranges must match exactly; superlatives must come from "
        "sorting or filtering, not guessing; a task that asks to submit or add something needs "
        "that done; an empty result is acceptable when the right actions were taken; the final "
        "state must satisfy every key point. Reply as 'Thoughts: ...' then 'Status: \"success\"' "
        "or 'Status: \"failure\"'."
    ),
}
PROMPT_FILES = {name: f"{name}.txt" for name in PROMPTS}


def load_prompts(directory: str | Path | None) -> dict[str, str]:
    """Pomona's prompts, with any of them replaced by `<name>.txt` from `directory`."""
    prompts = dict(PROMPTS)
    if directory is not None:
        for name, filename in PROMPT_FILES.items():
            path = Path(directory) / filename
            if path.exists():
                prompts[name] = path.read_text()
    return prompts


# --- WebVoyager ---------------------------------------------------------------------------------

WEBVOYAGER_PARAMS = {"temperature": 0, "seed": 42, "max_tokens": 1000}


def parse_webvoyager(text: str) -> int | None:
    if "NOT SUCCESS" in text:
        return 0
    if "SUCCESS" in text:
        return 1
    return None


def webvoyager_messages(
    prompts: dict[str, str], task: str, answer: str, screenshots: list[bytes]
) -> list[dict[str, Any]]:
    content = [
        {
            "type": "text",
            "text": f"TASK: {task}\nResult Response: {answer}\n"
            f"{len(screenshots)} screenshots at the end: ",
        }
    ]
    content += [image_part(s) for s in screenshots]
    content.append({"type": "text", "text": "Your verdict:\n"})
    return [
        {"role": "system", "content": prompts["webvoyager_system"]},
        {"role": "user", "content": content},
    ]


def judge_webvoyager(
    chat: Chat,
    task: str,
    answer: str | None,
    screenshots: list[bytes],
    *,
    k: int = 15,
    prompts: dict[str, str] = PROMPTS,
) -> dict[str, Any]:
    if not answer:
        return {"label": 0, "response": None, "reason": "no answer: 0 without a judge call"}
    response = chat(
        webvoyager_messages(prompts, task, answer, screenshots[-k:]), **WEBVOYAGER_PARAMS
    )
    return {"label": parse_webvoyager(response), "response": response}


# --- DeepShop -----------------------------------------------------------------------------------

DEEPSHOP_PARTS = ("attribute", "filter", "sort")


def judge_deepshop(
    chat: Chat,
    row: dict[str, Any],
    answer: str | None,
    screenshots: list[bytes],
    *,
    k: int = 15,
    prompts: dict[str, str] = PROMPTS,
) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for part in DEEPSHOP_PARTS:
        query = row.get(part)
        if not query or query == "None":
            continue
        verdict = judge_webvoyager(chat, query, answer, screenshots, k=k, prompts=prompts)
        parts[part] = {**verdict, "label": verdict["label"] or 0}  # unjudged counts 0
    overall = 1
    for verdict in parts.values():
        overall *= verdict["label"]
    return {"label": overall if parts else 0, "parts": parts}


# --- Online-Mind2Web's WebJudge -----------------------------------------------------------------

IMAGE_THRESHOLD = 3
MAX_IMAGES = 50


def parse_key_points(text: str) -> str:
    text = text.replace("**", "")
    if "Key Points:" in text:
        text = text.split("Key Points:", 1)[1]
    return "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())


def parse_image_score(text: str) -> tuple[int, str]:
    """(score, reasoning): the last `Score: N`; 0 when there is none."""
    found = re.findall(r"Score\W*([1-5])", text)
    reasoning = re.split(r"Score\W*[1-5]", text)[0].strip()
    return (int(found[-1]) if found else 0), reasoning


def parse_outcome(text: str) -> int:
    lowered = text.lower()
    if "status:" not in lowered:
        return 0
    return 1 if "success" in lowered.split("status:")[-1] else 0


@dataclass
class WebJudgeRecord:
    key_points: str = ""
    image_judge_record: list[dict[str, Any]] = field(default_factory=list)
    response: str = ""
    predicted_label: int = 0


def judge_webjudge(
    chat: Chat,
    task: str,
    action_history: list[str],
    screenshots: list[bytes],
    *,
    prompts: dict[str, str] = PROMPTS,
) -> dict[str, Any]:
    record = WebJudgeRecord()
    record.key_points = parse_key_points(
        chat(
            [
                {"role": "system", "content": prompts["webjudge_key_points"]},
                {"role": "user", "content": f"Task: {task}"},
            ],
            temperature=0,
        )
    )
    kept: list[tuple[bytes, str]] = []
    for i, shot in enumerate(screenshots):
        text = chat(
            [
                {"role": "system", "content": prompts["webjudge_image"]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": f"Task: {task}\nKey Points:\n{record.key_points}"},
                        image_part(shot),
                    ],
                },
            ],
            temperature=0,
        )
        score, reasoning = parse_image_score(text)
        record.image_judge_record.append({"index": i, "Response": text, "Score": score})
        if score >= IMAGE_THRESHOLD:
            kept.append((shot, reasoning))
    kept = kept[-MAX_IMAGES:]
    history = "\n".join(f"{n}. {a}" for n, a in enumerate(action_history, 1)) or "(no actions)"
    notes = "\n".join(f"{n}. {r}" for n, (_, r) in enumerate(kept, 1)) or "(no screenshot kept)"
    content = [
        {
            "type": "text",
            "text": f"Task: {task}\nKey Points:\n{record.key_points}\n"
            f"Action History:\n{history}\nThe most relevant screenshots, with notes:\n{notes}",
        }
    ]
    content += [image_part(shot) for shot, _ in kept]
    record.response = chat(
        [
            {"role": "system", "content": prompts["webjudge_outcome"]},
            {"role": "user", "content": content},
        ],
        temperature=0,
    )
    record.predicted_label = parse_outcome(record.response)
    return {
        "label": record.predicted_label,
        "key_points": record.key_points,
        "image_judge_record": record.image_judge_record,
        "evaluation_details": {
            "response": record.response,
            "predicted_label": record.predicted_label,
        },
    }


# --- which judge a benchmark uses ---------------------------------------------------------------

JUDGE_OF = {
    "webvoyager-local": "webvoyager",
    "deepshop-local": "deepshop",
    "mind2web-local": "webjudge",
}


def run_judge(
    benchmark: str,
    chat: Chat,
    task: Any,
    answer: str | None,
    steps: list[dict[str, Any]],
    screenshots: list[bytes],
    prompts: dict[str, str] = PROMPTS,
) -> dict[str, Any] | None:
    """The benchmark's own judge over one trajectory (None for benchmarks judged by their page)."""
    kind = JUDGE_OF.get(benchmark)
    if kind == "webvoyager":
        return {
            "judge": kind,
            **judge_webvoyager(chat, task.instruction, answer, screenshots, prompts=prompts),
        }
    if kind == "deepshop":
        return {
            "judge": kind,
            **judge_deepshop(chat, task.metadata["deepshop"], answer, screenshots, prompts=prompts),
        }
    if kind == "webjudge":
        history = [s["action"] for s in steps]  # factual actions only, never the final answer
        return {
            "judge": kind,
            **judge_webjudge(chat, task.instruction, history, screenshots, prompts=prompts),
        }
    return None


def agreement(pairs: list[tuple[bool, int | None]]) -> float | None:
    """The share of judged episodes where the judge's label agrees with the oracle's verdict."""
    judged = [(o, j) for o, j in pairs if j is not None]
    if not judged:
        return None
    return sum(bool(o) == bool(j) for o, j in judged) / len(judged)
