"""The official browser benchmarks, read from the user's checkouts at run time (nothing of them
is copied into Pomona):

    webvoyager:PATH   a MinorJerry/WebVoyager checkout: data/WebVoyager_data.jsonl (643 tasks)
                      with data/reference_answer.json, as they are; the agent's system prompt
                      from prompts.py; judged by evaluation/auto_eval.py's own function
                      (auto_eval_by_gpt4v), imported from the checkout and run over the
                      trajectory in WebVoyager's layout, with as many screenshots as
                      evaluation/run_eval.sh passes (--max_attached_imgs)
    DeepShop          a youganglyu/DeepShop checkout: the SYSTEM_PROMPT and USER_PROMPT of
                      src/evaluation/auto_eval_{attribute,filter,sort}.py (read as constants:
                      their functions read hard-coded result paths, so they cannot be called)
    Online-Mind2Web   an OSU-NLP-Group/Online-Mind2Web checkout: src/methods/
                      webjudge_online_mind2web.py's WebJudge_Online_Mind2Web_eval, its
                      utils.OpenaiEngine and extract_predication, run as src/run.py runs them
                      over Online-Mind2Web's result.json layout

Their sites are the live web: an episode needs a browser sandbox with `network="full"`, which
the machines Pomona is tested on lack (a start page that cannot be reached is a typed failure,
never a 0). The judges work offline: test_official.py runs auto_eval.py's procedure over the
checkout's own recorded examples (results/examples/) and checks that Pomona sends the judge
exactly the messages the official script sends.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.util
import io
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pomona.benchmarks.task import Environment, Score, Task, VerifierError
from pomona.errors import PomonaError, Signal

WEBVOYAGER = "webvoyager"
DEFAULT_IMAGES = 15  # evaluation/run_eval.sh's --max_attached_imgs, if it cannot be read


class CheckoutError(PomonaError, ValueError):
    """A benchmark checkout lacks a file Pomona reads from it; the message names the file."""


def _need(path: Path, what: str) -> Path:
    if not path.exists():
        raise CheckoutError(f"{path} is missing: it is {what}")
    return path


def constants(path: Path, *names: str) -> dict[str, str]:
    """String constants assigned at a Python file's top level, read without running it."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    missing = [n for n in names if n not in found]
    if missing:
        raise CheckoutError(f"{path} has no {', '.join(missing)} (a string constant)")
    return found


def module_from(path: Path, name: str, siblings: dict[str, Path] | None = None) -> ModuleType:
    """Import a checkout's Python file under a name of Pomona's own; `siblings` are modules it
    imports by a bare name (`from utils import ...`), made importable only while it loads."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CheckoutError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    saved = {n: sys.modules.get(n) for n in siblings or {}}
    try:
        for bare, sibling in (siblings or {}).items():
            sys.modules[bare] = module_from(sibling, f"{name}__{bare}")
        spec.loader.exec_module(module)
    except ImportError as e:
        raise CheckoutError(
            f"{path} needs a package Pomona lacks ({e.name}): pip install it beside Pomona"
        ) from e
    finally:
        for bare, old in saved.items():
            if old is None:
                sys.modules.pop(bare, None)
            else:
                sys.modules[bare] = old
    return module


# --- WebVoyager ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebVoyagerCheckout:
    root: Path

    @property
    def data(self) -> Path:
        return _need(self.root / "data" / "WebVoyager_data.jsonl", "WebVoyager's task file")

    def system_prompt(self) -> str:
        """The agent's system prompt (prompts.py's SYSTEM_PROMPT)."""
        path = _need(self.root / "prompts.py", "WebVoyager's agent prompts")
        return constants(path, "SYSTEM_PROMPT")["SYSTEM_PROMPT"]

    def judge_module(self) -> ModuleType:
        path = _need(self.root / "evaluation" / "auto_eval.py", "WebVoyager's judge")
        return module_from(path, "pomona_checkout_webvoyager_auto_eval")

    def judge_images(self) -> int:
        """How many screenshots the judge sees: run_eval.sh's --max_attached_imgs."""
        script = self.root / "evaluation" / "run_eval.sh"
        found = (
            re.search(r"--max_attached_imgs\s+(\d+)", script.read_text())
            if script.exists()
            else None
        )
        return int(found.group(1)) if found else DEFAULT_IMAGES

    def rows(self) -> list[dict[str, Any]]:
        lines = self.data.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def reference_answers(self) -> dict[str, dict[str, Any]]:
        """{task id: {type, ans, notice}} from reference_answer.json."""
        path = _need(self.root / "data" / "reference_answer.json", "WebVoyager's answers")
        out: dict[str, dict[str, Any]] = {}
        for web_name, site in json.loads(path.read_text()).items():
            for answer in site.get("answers", []):
                out[f"{web_name}--{answer['id']}"] = {**answer, "notice": site.get("notice", "")}
        return out


@dataclass(frozen=True)
class JudgedOnly:
    """The official sets have no programmatic grader: their judge gives the verdict (runner.py
    asks it). Without a judge an attempt is not scored, never scored 0."""

    def collect(self, task: Task, session: Any) -> dict[str, Any]:
        return {}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        raise VerifierError(
            f"{task.benchmark} is graded by its own judge only: name a judge model (--judge M)"
        )


def webvoyager_tasks(path: str | Path) -> list[Task]:
    checkout = WebVoyagerCheckout(Path(path).expanduser().resolve())
    answers = checkout.reference_answers()
    label = f"{WEBVOYAGER}:{checkout.root.name}"
    return [
        Task(
            id=row["id"],
            instruction=row["ques"],
            scorer=JudgedOnly(),
            environment=Environment(image="host", network="full", browser=True),
            benchmark=label,
            metadata={
                **row,
                "webvoyager": row,
                "reference_answer": answers.get(row["id"]),
                "checkout": str(checkout.root),
                "official": WEBVOYAGER,
            },
        )
        for row in checkout.rows()
    ]


class _GiveUp(Signal):
    """Raised through auto_eval.py's `while True: try ... except Exception` retry loop, which
    would otherwise retry a failing judge endpoint forever."""


class _Completions:
    def __init__(self, client: Any, attempts: int, replies: list[str]):
        self.client, self.attempts, self.replies, self.failures = client, attempts, replies, 0

    def create(self, **params: Any) -> Any:
        try:
            response = self.client.chat.completions.create(**params)
        except Exception as e:
            self.failures += 1
            if self.failures >= self.attempts:
                raise _GiveUp(repr(e)) from e
            raise
        self.replies.append(response.choices[0].message.content or "")
        return response


class JudgeClient:
    """An OpenAI client for a checkout's judge code: its calls are counted (a judge that keeps
    failing is given up on) and its replies kept."""

    def __init__(self, base_url: str, api_key: str, attempts: int = 3):
        import openai

        self.replies: list[str] = []
        inner = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=2)
        self.completions = _Completions(inner, attempts, self.replies)

    @property
    def chat(self) -> JudgeClient:
        return self


@contextlib.contextmanager
def _quiet(log: io.StringIO) -> Iterator[None]:
    with contextlib.redirect_stdout(log):
        yield


def judge_webvoyager_layout(
    checkout: str | Path, task_dir: Path, client: JudgeClient, model: str
) -> dict[str, Any]:
    """auto_eval.py's own auto_eval_by_gpt4v over one trajectory in WebVoyager's layout
    (task<ID>/interact_messages.json + screenshot<N>.png). label: 1, 0 or None (no verdict)."""
    repo = WebVoyagerCheckout(Path(checkout))
    auto_eval = repo.judge_module()
    log = io.StringIO()
    try:
        with _quiet(log):
            label = auto_eval.auto_eval_by_gpt4v(str(task_dir), client, model, repo.judge_images())
    except _GiveUp as e:
        raise VerifierError(f"the judge endpoint kept failing: {e}") from None
    except SystemExit:  # auto_eval.py exits on an InvalidRequestError
        raise VerifierError("the judge refused the request (auto_eval.py exited)") from None
    return {
        "judge": "webvoyager-official",
        "label": label,
        "response": client.replies[-1] if client.replies else None,
        "log": log.getvalue()[-4000:],
    }


# --- DeepShop ------------------------------------------------------------------------------------

DEEPSHOP_FILES = {
    part: f"src/evaluation/auto_eval_{part}.py" for part in ("attribute", "filter", "sort")
}


def deepshop_prompts(checkout: str | Path) -> dict[str, tuple[str, str]]:
    """{part: (SYSTEM_PROMPT, USER_PROMPT)} from DeepShop's three judge scripts."""
    out = {}
    for part, relative in DEEPSHOP_FILES.items():
        path = _need(Path(checkout) / relative, f"DeepShop's {part} judge")
        found = constants(path, "SYSTEM_PROMPT", "USER_PROMPT")
        out[part] = (found["SYSTEM_PROMPT"], found["USER_PROMPT"])
    return out


# --- Online-Mind2Web's WebJudge --------------------------------------------------------------------

WEBJUDGE_MODE = "WebJudge_Online_Mind2Web_eval"


def webjudge_layout(
    checkout: str | Path,
    task_dir: Path,
    base_url: str,
    api_key: str,
    model: str,
    score_threshold: int = 3,
) -> dict[str, Any]:
    """WebJudge as Online-Mind2Web's src/run.py runs it over one result.json (schema v2): the
    method's own messages, its OpenaiEngine (pointed at the judge's endpoint) and its
    extract_predication."""
    src = Path(checkout) / "src"
    utils_path = _need(src / "utils.py", "Online-Mind2Web's model wrapper")
    method = module_from(
        _need(src / "methods" / "webjudge_online_mind2web.py", "Online-Mind2Web's WebJudge"),
        "pomona_checkout_webjudge",
        siblings={"utils": utils_path},
    )
    utils = module_from(utils_path, "pomona_checkout_webjudge_utils")
    result = json.loads((task_dir / "result.json").read_text())
    steps = result["action_history"]
    actions = [step["action"] for step in steps[:-1]]  # run.py drops the final (answer) step
    images = [str(task_dir / "trajectory" / Path(step["screenshot"]).name) for step in steps]
    engine = utils.OpenaiEngine(model=model, api_key=api_key)
    import openai

    engine.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=2)
    log = io.StringIO()
    with _quiet(log):
        messages, text, system_msg, record, key_points = asyncio.run(
            method.WebJudge_Online_Mind2Web_eval(
                result["task"], actions, images, engine, score_threshold
            )
        )
        response = engine.generate(messages)[0]
    label = utils.extract_predication(response, WEBJUDGE_MODE)
    return {
        "judge": "webjudge-official",
        "label": label,
        "key_points": key_points,
        "image_judge_record": record,
        "evaluation_details": {"response": response, "predicted_label": label},
        "input_text": text,
    }
