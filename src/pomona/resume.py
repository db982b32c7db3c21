"""`pomona run --resume RUN`: play again exactly the attempts of a run that have no model result
(missing: the run was killed while they played; or ended in an infrastructure failure), with the
run's own settings from its manifest, under the same run id, so the trajectories hold one run.
Which attempts those are is pomona.benchmarks.resume's business; this module only runs them.
"""

from __future__ import annotations

from pathlib import Path

from pomona.benchmarks.resume import RunManifest, pending, stored
from pomona.run import DEFAULT_TRAJECTORIES, RunResult, run_benchmark


def resume_run(
    run_id: str,
    trajectories: str | Path = DEFAULT_TRAJECTORIES,
    *,
    state_dir: str | None = None,
    concurrency: int | None = None,
    progress: bool = True,
) -> RunResult:
    """The rest of run `run_id`; its result covers the whole run (earlier results included)."""
    manifest = RunManifest.load(trajectories, run_id)
    todo = pending(stored(trajectories), run_id, manifest.planned)
    return run_benchmark(
        manifest.benchmark, manifest.harness, manifest.model, k=manifest.k,
        runtime=manifest.runtime, trajectories=trajectories,
        concurrency=concurrency or manifest.concurrency, timeout=manifest.timeout,
        models=manifest.models, task_ids=manifest.tasks, state_dir=state_dir,
        progress=progress, judge=manifest.judge, judge_prompts=manifest.judge_prompts,
        image=manifest.image, run_id=run_id, only=todo,
    )  # fmt: skip
