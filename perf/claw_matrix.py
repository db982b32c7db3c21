"""The cross-harness matrix on official tasks, and the fidelity table behind it: the scripted
solutions of tests/claw/solutions/ played, for real, by each harness with the tasks' tools over
MCP (Claw-Eval's own loop reaching them its own way), every recorded episode then graded again
by the benchmark's own code run directly from its checkout (tests/claw/official.py), and both
scores printed side by side. pi has no MCP client Pomona can configure, so it plays the
QwenClawBench tasks only (they need no tools but the shell); the native loop plays Claw-Eval's.

    python perf/claw_matrix.py                         # 8 Claw-Eval + 4 QwenClawBench tasks
    python perf/claw_matrix.py --all --harnesses claw-eval claude-code   # every solution
    python perf/claw_matrix.py --first 3 --out DIR     # 3 tasks of each, trajectories kept
    python perf/claw_matrix.py --regrade DIR...        # tabulate what earlier runs recorded

Prints markdown: one row per task, one column per harness, each cell the episode's score and
`=` where the official grader gives the same (`≠ x` with its score where it does not, `n/a`
where the harness cannot play the task, the failure kind where the episode did not run).
The judge is the scripted stand-in (`judge: scripted`). Uses ../shared/benchmarks/ checkouts.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.claw import official  # noqa: E402
from tests.claw.conftest import CHECKOUTS, solved  # noqa: E402

HARNESSES = ["claw-eval", "openclaw", "claude-code", "codex", "hermes", "opencode", "pi"]
MCP = {"claw-eval", "openclaw", "claude-code", "codex", "hermes", "opencode"}
CLAW_SLICE = [
    "T003zh_calendar_scheduling", "T007zh_todo_management", "T009zh_contact_lookup",
    "T011zh_expense_report", "T015zh_kb_search", "T017zh_ticket_triage",
    "T023zh_crm_data_export", "T099_pinbench_second_brain_recall",
]  # fmt: skip
# (a task per service: calendar, todo, contacts, finance, kb, helpdesk, crm, notes)
QWEN_SLICE = [
    "task_00010_openclaw_subtask_isolation_configuration_skill",
    "task_00030_openclaw_gateway_crash_root_cause_analysis_and_recovery_plan",
    "task_00067_write_sparql_query_for_product_reviews_containing_iphone",
    "task_00094_exam_monitor_system_audit_cron_sync_bug_rate_limit_gap_and_site",
]


def _artifact(record: Any, name: str) -> Path:
    uri = next(a["uri"] for a in record.artifacts if a["name"] == f"grading/{name}")
    return Path(uri.removeprefix("file://"))


def play(tasks: list[Any], harness: str, proxy: Any, state: str) -> dict[str, Any]:
    from pomona.episodes.rollouts import rollout

    records = asyncio.run(
        rollout(
            tasks, harness, "oracle", n=1, concurrency=4, proxy=proxy, runtime="local",
            state_dir=state, timeout=900, progress=False,
        )
    )  # fmt: skip
    return {r.task.split("/", 1)[1]: r for r in records}


def official_scores(kind: str, records: dict[str, Any], proxy: Any, work: Path) -> list[Any]:
    """The benchmark's own grading of each recorded episode (None where it did not run)."""
    from pomona.benchmarks.claw.judge import JudgeSpec, open_judge

    checkout = CHECKOUTS[kind]
    jobs, index = [], []
    for task, r in records.items():
        if r.failure_kind != "none":
            continue
        judge = open_judge(proxy, JudgeSpec(), kind, of="matrix", task=task)
        url = f"{proxy.url}/e/{judge['key']}/v1"
        if kind == "claw-eval":
            jobs.append(
                {
                    "task_dir": str(checkout / "tasks" / task),
                    "trace": str(_artifact(r, "trace.jsonl")),
                    "snapshot": str(_artifact(r, "env_snapshot.json")),
                    "judge_url": url,
                }
            )
        else:
            where = work / f"{task}-{r.episode}"
            data = _artifact(r, "workspace.tar").read_bytes()
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(where, filter="data")
            jobs.append(
                {
                    "task_file": str(checkout / "data/qwenclawbench-v1.1-100/tasks" / f"{task}.md"),
                    "transcript": str(_artifact(r, "transcript.json")),
                    "workspace": str(where),
                    "judge_url": url,
                }
            )
        index.append(task)
    answers = official.run(kind, checkout, jobs) if jobs else []
    key = "task_score" if kind == "claw-eval" else "score"
    found = {task: a[key] for task, a in zip(index, answers, strict=True)}
    return [found.get(task) for task in records]


def cell(record: Any, theirs: float | None) -> str:
    if record is None:
        return "n/a"
    if record.failure_kind != "none":
        return record.failure_kind
    mark = "=" if theirs == record.reward else f"≠ {theirs:.2f}"
    return f"{record.reward:.2f} {mark}"


def recorded(directories: list[Path]) -> dict[str, dict[str, dict[str, Any]]]:
    """{kind: {harness: {task: episode}}} of the agent episodes earlier runs recorded."""
    from types import SimpleNamespace

    from pomona import trajectories

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for directory in directories:
        for r in trajectories.read(directory, "episodes").to_pylist():
            if json.loads(r["metadata"] or "{}").get("role"):
                continue  # a judge's or the simulated user's episode
            kind, task = r["task"].split("/", 1)
            out.setdefault(kind, {}).setdefault(r["harness"], {})[task] = SimpleNamespace(
                failure_kind=r["failure_kind"],
                reward=r["reward"],
                artifacts=r["artifacts"] or [],
                episode=r["episode"],
            )
    return out


def release(work: Path) -> None:
    """Close the rollouts' sandbox clients and unmount their stores (else the temp dir stays)."""
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared()
    for store in work.glob("*/*/store"):
        LocalRuntime(str(store.parent)).unmount_store()


def tabulate(table: dict[str, dict[str, str]], harnesses: list[str], seconds: float) -> None:
    print(f"| task | {' | '.join(harnesses)} |")
    print(f"|---|{'---|' * len(harnesses)}")
    for task, row in table.items():
        print(f"| {task} | {' | '.join(row.get(h, 'n/a') for h in harnesses)} |")
    equal = sum(c.endswith(" =") for row in table.values() for c in row.values())
    scored = sum(c[:1].isdigit() for row in table.values() for c in row.values())
    print(f"\n{equal}/{scored} episodes scored as the official grader scores them; "
          f"{len(table)} tasks, {seconds:.0f} s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--harnesses", nargs="*", default=HARNESSES)
    p.add_argument("--all", action="store_true", help="every scripted solution, not the slice")
    p.add_argument("--first", type=int, help="only the first N tasks of each benchmark's slice")
    p.add_argument(
        "--out", type=Path, help="keep the run's trajectories here (default: a temp dir)"
    )
    p.add_argument(
        "--regrade", type=Path, nargs="+", metavar="DIR",
        help="play nothing: tabulate the episodes recorded in DIR... (earlier runs' trajectories)",
    )  # fmt: skip
    args = p.parse_args(argv)
    from pomona.harnesses import payload
    from pomona.proxy import ProxyConfig, ProxyServer

    if args.regrade:
        harnesses = args.harnesses
    else:
        report = payload.install(args.harnesses)
        harnesses = [h for h in args.harnesses if h not in {**report.unavailable, **report.failed}]
    chosen = {
        "claw-eval": None if args.all else CLAW_SLICE[: args.first],
        "qwenclawbench": None if args.all else QWEN_SLICE[: args.first],
    }
    table: dict[str, dict[str, str]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        earlier = recorded(args.regrade) if args.regrade else {}
        with ProxyServer(ProxyConfig(trajectories=work / "runs")) as proxy:
            for kind, ids in chosen.items():
                tasks = [] if args.regrade else solved(kind, ids)
                for harness in harnesses:
                    # Claw-Eval's tasks need their tools (MCP); its own loop plays only its own
                    if not (harness in MCP if kind == "claw-eval" else harness != "claw-eval"):
                        continue
                    records = earlier.get(kind, {}).get(harness, {}) if args.regrade else play(
                        tasks, harness, proxy, str(work / harness / kind)
                    )  # fmt: skip
                    theirs = official_scores(kind, records, proxy, work / "work")
                    for (task, record), score in zip(records.items(), theirs, strict=True):
                        table.setdefault(task, {})[harness] = cell(record, score)
        release(work)
    tabulate(table, harnesses, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
