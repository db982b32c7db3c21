"""What verification costs: Pomona's verifier now (a fresh sandbox of the pristine image, the
witness, the spoof rules) beside Pomona's verifier before it (`--baseline`, by default the commit
before it landed, run from a checkout of its own) and swebench's own run_evaluation.

    .venv/bin/python perf/grade_bench.py [--workers 2] [--baseline REF] [--episodes 4] [--no-docker]

SWE-bench: every shipped swe-local task with its gold patch, graded from scratch in a fresh
directory by `pomona grade` on the local runtime (the task repo as it ships: host-image tasks)
and, with a Docker engine, on official-layout images (tests/benchmarks/official.py, built
here: no registry is reachable) by swebench's run_evaluation and by `pomona grade` on both
runtimes. Terminal-Bench: the oracle of a task written for harbor's shared default (no
artifacts: its workdir is the output; tests/benchmarks/hacks.py) and of the shipped
count-errors (separate, one artifact), `--episodes` times each, timing only the verification
(`TbScorer.collect`) after the agent's sandbox is solved. Wall seconds; the machine's load is
printed, as every figure depends on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pomona.benchmarks import swebench  # noqa: E402
from pomona.benchmarks.swebench import task_sets  # noqa: E402
from pomona.benchmarks.terminal_bench import DATA as TB_DATA  # noqa: E402
from tests.benchmarks import hacks, official  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")
BASELINE = "d8b5c3f"  # main just before the fresh verifier (the SWE package move)

TB_TIMING = """
import json, sys, time
from pomona import SandboxClient
from pomona.benchmarks import terminal_bench as tb
task_dir, state, episodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
task = tb.load_task(task_dir)
seconds, rewards = [], []
with SandboxClient("local", state_dir=state) as client:
    for _ in range(episodes):
        env = task.environment
        with client.create_sandbox(env.image, workdir=env.workdir, user=env.user,
                                   network="none") as agent:
            task.prepare(agent)
            for line in task.solution:
                agent.exec(line, timeout=300)
            t0 = time.monotonic()
            score = task.scorer.score(task, task.scorer.collect(task, agent))
            seconds.append(time.monotonic() - t0)
            rewards.append(score.reward)
print(json.dumps({"mode": task.scorer.resolved_mode(), "seconds": seconds, "rewards": rewards}))
"""


def checkout(ref: str, into: Path) -> Path:
    """`ref` in a detached worktree of its own (removed by `drop`)."""
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(into), ref], check=True
    )
    return into


def drop(worktree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False
    )


def env_for(src: Path) -> dict[str, str]:
    """Python finds `src`'s pomona before the venv's own."""
    return {**os.environ, "PYTHONPATH": str(src)}


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    t0 = time.monotonic()
    subprocess.run(command, cwd=cwd, env=env, check=False, capture_output=True)
    return time.monotonic() - t0


def resolved(report: Path) -> str:
    try:
        data = json.loads(report.read_text())
    except OSError:
        return "no report"
    return f"{data['resolved_instances']}/{data['total_instances']}"


def official_dataset(directory: Path) -> Path:
    from swebench.task.checks import expected_image

    rows = []
    for inst in swebench.load_instances(task_sets.DATA):
        image = official.build(expected_image(inst["instance_id"]), inst)
        rows.append(official.official_row(inst, image))
    path = directory / "dataset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def statuses(cwd: Path) -> dict[str, dict[str, str]]:
    """Per instance, every test's bucket (FAIL_TO_PASS success, PASS_TO_PASS failure, ...) and
    the verdict, from the report.json files a tool left under `cwd`."""
    out = {}
    for path in sorted(cwd.glob("logs/run_evaluation/b/*/*/report.json")):
        for iid, entry in json.loads(path.read_text()).items():
            tests = {"resolved": str(entry.get("resolved"))}
            for kind, buckets in (entry.get("tests_status") or {}).items():
                for bucket, names in buckets.items():
                    tests.update({name: f"{kind} {bucket}" for name in names})
            out[iid] = tests
    return out


def differential(reference: Path, others: dict[str, Path]) -> None:
    """Each tool's per-test statuses and verdicts beside swebench's own on the same rows."""
    theirs = statuses(reference)
    print("\nDifferential against swebench run_evaluation (same rows, images and predictions)")
    print(f"{'tool':44} {'tests agree':>12} {'verdicts agree':>15}")
    for name, cwd in others.items():
        ours = statuses(cwd)
        tests = same = verdicts = same_verdict = 0
        for iid, expected in theirs.items():
            got = ours.get(iid, {})
            for test, status in expected.items():
                if test == "resolved":
                    verdicts += 1
                    same_verdict += got.get(test) == status
                else:
                    tests += 1
                    same += got.get(test) == status
        print(f"{name:44} {f'{same}/{tests}':>12} {f'{same_verdict}/{verdicts}':>15}")


def swe_table(work: Path, baseline: Path, workers: int, docker: bool, state: str) -> None:
    grade = ["-m", "pomona.cli", "grade", "-p", "gold", "--run-id", "b",
             "--max-workers", str(workers)]  # fmt: skip
    now, before = env_for(REPO / "src"), env_for(baseline / "src")
    rows: list[tuple[str, list[str], dict[str, str] | None]] = []
    shipped = ["-d", str(task_sets.DATA), "--state-dir", state]
    rows += [("pomona grade, local, host tasks (before)", [PYTHON, *grade, *shipped], before)]
    rows += [("pomona grade, local, host tasks (now)", [PYTHON, *grade, *shipped], now)]
    if docker:
        data = ["-d", str(official_dataset(work))]
        rows += [
            ("swebench run_evaluation, docker", [PYTHON, "-m", "swebench.harness.run_evaluation",
             *data, "-p", "gold", "--run_id", "b", "--max_workers", str(workers)], None),
            ("pomona grade, docker, official (before)", [PYTHON, *grade, *data, "--runtime",
             "docker"], before),
            ("pomona grade, docker, official (now)", [PYTHON, *grade, *data, "--runtime",
             "docker"], now),
            ("pomona grade, local, official (before)", [PYTHON, *grade, *data, "--state-dir",
             state], before),
            ("pomona grade, local, official (now)", [PYTHON, *grade, *data, "--state-dir",
             state], now),
        ]  # fmt: skip
    n = len(swebench.load_instances(task_sets.DATA))
    print(f"\nSWE-bench: {n} instances, gold, {workers} workers, load {os.getloadavg()[0]:.1f}")
    print(f"{'tool':44} {'seconds':>8} {'s/instance':>11}  resolved")
    dirs = {}
    for i, (name, command, env) in enumerate(rows):
        cwd = dirs[name] = work / f"swe-{i}"
        cwd.mkdir()
        seconds = run(command, cwd, env)
        print(f"{name:44} {seconds:8.1f} {seconds / n:11.1f}  {resolved(cwd / 'gold.b.json')}")
    if docker:
        reference = dirs.pop("swebench run_evaluation, docker")
        print("\ngold predictions:")
        differential(reference, {k: v for k, v in dirs.items() if "official (now)" in k})
        wrong_differential(work, data, workers, state)


def wrong_differential(work: Path, data: list[str], workers: int, state: str) -> None:
    """The shipped wrong fixtures (honest patches that do not fix the bug: tests fail for
    real) graded by swebench and by Pomona on both runtimes, per-test statuses compared."""
    preds = work / "wrong.jsonl"
    preds.write_text(
        "".join(
            json.dumps(swebench.prediction(i["instance_id"], "wrong", task_sets.fixture(
                i["instance_id"], "wrong"))) + "\n"
            for i in swebench.load_instances(task_sets.DATA)
        )
    )  # fmt: skip
    grade = [PYTHON, "-m", "pomona.cli", "grade", "-p", str(preds), "--run-id", "b",
             "--max-workers", str(workers), *data]  # fmt: skip
    now = env_for(REPO / "src")
    rows = {
        "swebench": ([PYTHON, "-m", "swebench.harness.run_evaluation", *data, "-p", str(preds),
                      "--run_id", "b", "--max_workers", str(workers)], None),
        "pomona grade, docker, official (now)": ([*grade, "--runtime", "docker"], now),
        "pomona grade, local, official (now)": ([*grade, "--state-dir", state], now),
    }  # fmt: skip
    dirs = {}
    for i, (name, (command, env)) in enumerate(rows.items()):
        dirs[name] = work / f"wrong-{i}"
        dirs[name].mkdir()
        run(command, dirs[name], env)
    print("\nwrong predictions:")
    differential(dirs.pop("swebench"), dirs)


def tb_table(work: Path, baseline: Path, episodes: int, state: str) -> None:
    calc = hacks.tb_task(work / "tb-calc")
    tasks = {"shared-default task (calc)": calc, "count-errors": TB_DATA / "count-errors"}
    print(f"\nTerminal-Bench: the oracle, {episodes} episodes each, load {os.getloadavg()[0]:.1f}")
    print(f"{'task':28} {'verifier':18} {'mode':9} {'median s':>9} {'max s':>7}  rewards")
    for name, task_dir in tasks.items():
        for label, src in (("before", baseline / "src"), ("now", REPO / "src")):
            out = subprocess.run(
                [PYTHON, "-c", TB_TIMING, str(task_dir), state, str(episodes)],
                env=env_for(src), capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode != 0:
                print(f"{name:28} {label:18} failed: {out.stderr.strip()[-300:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            s = sorted(r["seconds"])
            print(
                f"{name:28} {label:18} {r['mode']:9} {s[len(s) // 2]:9.2f} {s[-1]:7.2f}  "
                f"{r['rewards']}"
            )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--no-docker", action="store_true", help="skip the official-image rows")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pomona-grade-bench-"))
    state = tempfile.mkdtemp(prefix="pomona-grade-bench-state-")
    baseline = checkout(args.baseline, work / "baseline")
    try:
        swe_table(work, baseline, args.workers, not args.no_docker, state)
        tb_table(work, baseline, args.episodes, state)
    finally:
        from pomona.orchestrator.runtimes.local import LocalRuntime

        drop(baseline)
        LocalRuntime(state).unmount_store()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
