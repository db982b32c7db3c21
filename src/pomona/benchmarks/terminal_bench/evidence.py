"""What a Terminal-Bench verification rests on: the files the agent's declared output brought
into the fresh verifier sandbox (read against the pristine environment before they arrived),
which of them reach into the testing, and the verdict from the reward file, those findings and
the witness's account, written with its evidence to a log directory of its own.

A positive reward stands only when the witness shows the run's integrity: some pytest session
of the test script reported to it, none was tampered with, and, for a full reward, every one
finished with exit status 0 (a script that maps pytest's exit status to a reward is exactly
what an `os._exit(0)` from the code under test fools). A verifier that runs no pytest cannot
show it, so its positive reward is `suspect`. `shared` verification (a task that asks for its
agent's own sandbox) is reported as such, its reward the test script's, with no witness.
"""

from __future__ import annotations

import re
import shlex
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from pomona.benchmarks.verification import record
from pomona.benchmarks.verification.integrity import Integrity
from pomona.benchmarks.verification.record import Verification
from pomona.benchmarks.verification.spoof import Change, Finding, findings
from pomona.orchestrator.sdk.client import Sandbox

# git settings that make git run a command or rewrite what it reads
_GIT_EXECUTES = re.compile(
    r"^\s*(fsmonitor|hookspath|pager|editor|sshcommand|askpass|external|textconv|helper|"
    r"program|command|clean|smudge|process|uploadpack|receivepack|packobjectshook)\s*=|"
    r"^\s*\w+\s*=\s*!",
    re.I | re.M,
)


def scan(sandbox: Sandbox, paths: list[str]) -> dict[str, str]:
    """path -> content digest (or `-> target` for a link) of every file under `paths`."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    out = sandbox.exec(
        f"find {quoted} \\( -type f -o -type l \\) 2>/dev/null | while IFS= read -r f; do "
        'if [ -L "$f" ]; then printf "%s\\t-> %s\\n" "$f" "$(readlink "$f")"; '
        'else printf "%s\\t%s\\n" "$f" "$(sha256sum < "$f" | cut -c1-64)"; fi; done',
        user="root",
        timeout=300,
    ).stdout
    found = {}
    for line in out.splitlines():
        path, _, digest = line.partition("\t")
        if path:
            found[path] = digest
    return found


def changes(sandbox: Sandbox, before: dict[str, str], after: dict[str, str]) -> list[Change]:
    """What the output added or changed against the pristine environment, as the spoof rules
    read it (paths relative to /, the text of the files whose sections count)."""
    out = []
    for path, digest in sorted(after.items()):
        if before.get(path) == digest:
            continue
        text = None
        if PurePosixPath(path).name in ("setup.cfg", "pyproject.toml", "tox.ini", "config"):
            data = sandbox.exec(f"cat -- {shlex.quote(path)}", user="root", timeout=60)
            text = data.stdout if data.exit_code == 0 else None
        target = digest.removeprefix("-> ") if digest.startswith("-> ") else None
        status = "M" if path in before else "A"
        out.append(Change(path.lstrip("/"), status, target, None, text))
    return out


def _git_reach(change: Change) -> Finding | None:
    """In a repository the output carries (a task's answer may be one): an active hook, or a
    configuration that makes git run a command."""
    parts = PurePosixPath(change.path).parts
    if ".git" not in parts:
        return None
    inner = parts[parts.index(".git") + 1 :]
    if inner[:1] == ("hooks",) and not parts[-1].endswith(".sample"):
        return Finding(change.path, "an active git hook")
    if inner == ("config",) and change.after and _GIT_EXECUTES.search(change.after):
        return Finding(change.path, "a git configuration that runs commands")
    return None


def spoofs(found: list[Change]) -> list[Finding]:
    """The spoof rules over an output's files; a repository's own .git is output here, so only
    its hooks and command-running settings count."""
    in_repos = [c for c in found if ".git" in PurePosixPath(c.path).parts]
    rest = [c for c in found if c not in in_repos]
    packages = {str(PurePosixPath(c.path).parent) for c in found if c.path.endswith("__init__.py")}
    git = [f for c in in_repos if (f := _git_reach(c)) is not None]
    return git + findings(rest, set(), packages, stdlib=False)


def verdict(
    rewards: dict[str, float],
    reward: float,
    integrity: Integrity | None,
    spoof: list[Finding],
    exits: list[int],
) -> tuple[str, str]:
    """(verdict, reason) of one verification; `exits` are the witnessed pytest sessions' exit
    statuses, `integrity` None for a shared verification."""
    if spoof:
        why = "; ".join(f"/{f.path}: {f.why}" for f in spoof)
        return record.SPOOF, f"the agent's output reaches into its testing: {why}"
    if integrity is not None and reward > 0:
        problems = list(integrity.problems)
        if not integrity.witnessed:
            problems.append("no pytest session of the test script reported to the witness")
        if reward == 1.0 and any(code != 0 for code in exits):
            problems.append(
                f"a full reward while pytest ended with exit status {max(exits)} (its tests "
                "failed): the test script was told otherwise"
            )
        if problems:
            return record.SUSPECT, "; ".join(problems)
    if reward == 1.0:
        return record.RESOLVED, "the reward is full" + ("" if integrity else " (shared)")
    return record.UNRESOLVED, f"reward {rewards}"


def exit_statuses(records: list[dict[str, Any]]) -> list[int]:
    return [
        int(r.get("exitstatus", -1))
        for r in records
        if r.get("event") == "finish" and "exitstatus" in r
    ]


def write(root: Path, task_id: str, v: Verification, files: dict[str, str]) -> Path:
    """A log directory of its own for one verification: verification.json, witness.jsonl, and
    the verifier's own files (test-stdout.txt, the reward file)."""
    log_dir = root / task_id.replace("/", "__") / uuid.uuid4().hex[:12]
    v.write(log_dir)
    for name, text in files.items():
        (log_dir / name).write_text(text)
    return log_dir
