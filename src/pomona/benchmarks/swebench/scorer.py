"""A SWE-bench instance as a Task: the agent starts at /testbed on the base commit; its diff is
graded in a fresh sandbox the official way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pomona.benchmarks.swebench.grading import claim_run_id, grade
from pomona.benchmarks.swebench.instances import (
    AGENT_TIMEOUT,
    TESTBED,
    SweInstance,
    base_ref,
    image_of,
    load_instances,
    prediction,
    user_of,
)
from pomona.benchmarks.swebench.testbed import apply_commands, extract_patch, prepare_testbed
from pomona.benchmarks.task import Environment, Score, Task, VerifierError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient


@dataclass(frozen=True)
class SweScorer:
    """Takes the agent's diff, grades it in a fresh sandbox the official way. Grading evidence
    goes under `root`; `model` names the log directory, like `model_name_or_path`."""

    instance: SweInstance
    root: str = "pomona-runs/swebench"
    run_id: str = "pomona"
    model: str = "pomona"
    timeout: float = 1800
    client: SandboxClient | None = None  # grading sandboxes'; by default the agent sandbox's

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        patch = extract_patch(sandbox, base_ref(self.instance))
        client = self.client or sandbox._root
        iid = self.instance["instance_id"]
        pred = prediction(iid, self.model, patch)
        run_id = claim_run_id(self.root, self.run_id, self.model, iid)
        result = grade(client, self.instance, pred, self.root, run_id, self.timeout)
        if result.infra_failure:
            raise VerifierError(
                f"{result.instance_id}: {result.infra_failure} (see {result.log_dir})"
            )
        return {"prediction": pred, "grade": result.score().model_dump()}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        return Score.model_validate(artifacts["grade"])


@dataclass(frozen=True)
class SweTask(Task):
    """A SWE-bench instance as a Task: the agent starts at /testbed on the base commit."""

    scorer: SweScorer  # (the base's field, narrowed: it holds the instance)

    def prepare(self, sandbox: Sandbox) -> None:
        prepare_testbed(sandbox, self.scorer.instance)


def to_task(instance: SweInstance, benchmark: str = "swebench", **scorer: Any) -> SweTask:
    """The Task for one instance; `scorer` goes to SweScorer (root, run_id, model, client...)."""
    text = instance["problem_statement"]
    metadata: dict[str, Any] = {"instance": instance, "repo": instance["repo"]}
    if instance.get(AGENT_TIMEOUT):
        metadata["agent_timeout"] = float(instance[AGENT_TIMEOUT])
    return SweTask(
        id=instance["instance_id"],
        benchmark=benchmark,
        instruction=f"{text.rstrip()}\n\nThe repository is at {TESTBED}. Fix the issue by editing "
        "its source; do not change its tests.",
        scorer=SweScorer(instance, **scorer),
        environment=Environment(image=image_of(instance), workdir=TESTBED, user=user_of(instance)),
        solution=tuple(apply_commands(instance["patch"])),
        metadata=metadata,
    )


def tasks(source: str | Path, benchmark: str = "swebench", **scorer: Any) -> list[SweTask]:
    return [to_task(i, benchmark, **scorer) for i in load_instances(source)]
