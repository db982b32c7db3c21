"""What the witness's record says about a test run: which runners reported, each test's outcome
as they saw it, and every reason the run's own account cannot be trusted.

A pure function of the records `witness.collect` returned. A run whose integrity is shown has
at least one runner that started, reported and finished, with no tampering found by its checks,
every test process of a Node run that said goodbye, nothing on the socket that was not a
runner, and pytest loaded from the image's own site directories.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS = (
    "PASSED",
    "FAILED",
    "ERROR",
    "SKIPPED",
    "XFAIL",
    "XPASS",
)


@dataclass
class Integrity:
    """The witness's account of one test run."""

    runners: list[str] = field(default_factory=list)  # the sessions that reported, by runner
    problems: list[str] = field(default_factory=list)  # why the run's own account is not trusted
    statuses: dict[str, str] = field(default_factory=dict)  # pytest: node id -> status
    tap: list[str] = field(default_factory=list)  # node --test: its TAP result lines

    @property
    def witnessed(self) -> bool:
        return bool(self.runners)

    @property
    def shown(self) -> bool:
        """Integrity is shown: some runner reported, and nothing is wrong."""
        return self.witnessed and not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "shown": self.shown,
            "runners": self.runners,
            "problems": self.problems,
            "tests_witnessed": len(self.statuses) + len(self.tap),
        }


def pytest_status(reports: list[dict[str, Any]]) -> str:
    """One test's status from its setup/call/teardown reports, as pytest's -rA summary names it."""
    by_phase = {r.get("when"): r for r in reports}
    call = by_phase.get("call")
    if call is not None and call.get("outcome") == "failed":
        return FAILED
    if any(r.get("outcome") == "failed" for r in reports):
        return ERROR
    phase = call or by_phase.get("setup") or {}
    if phase.get("outcome") == "skipped":
        return XFAIL if phase.get("xfail") else SKIPPED
    if phase.get("outcome") == "passed" and call is not None:
        return XPASS if call.get("xfail") else PASSED
    return ERROR


def _sessions(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    by_conn: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        if isinstance(record.get("conn"), int):
            by_conn.setdefault(record["conn"], []).append(record)
    return by_conn


def _pytest(
    events: list[dict[str, Any]], sites: list[str], untrusted: list[str], found: Integrity
) -> None:
    start = events[0]
    pid = start.get("peer_pid")
    reports: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        found.problems += [f"pytest (pid {pid}): {t}" for t in e.get("tampered") or ()]
        if e.get("event") == "report" and isinstance(e.get("nodeid"), str):
            reports.setdefault(e["nodeid"], []).append(e)
    if not any(e.get("event") == "finish" for e in events):
        found.problems.append(
            f"pytest (pid {pid}) never finished its session: it was killed, or code under test "
            "ended the process"
        )
    origins = start.get("origins") or {}
    for module in ("pytest", "_pytest", "pluggy", "pomona_witness"):
        origin = str(origins.get(module) or "")
        if any(origin.startswith(u.rstrip("/") + "/") for u in untrusted):
            found.problems.append(
                f"the code under test is the test runner itself ({module} from {origin}): the "
                "runner's integrity cannot be shown"
            )
        elif not any(origin.startswith(site.rstrip("/") + "/") for site in sites):
            found.problems.append(
                f"pytest (pid {pid}) loaded {module} from {origin or 'nowhere'}, not from the "
                "image's own site directories"
            )
    for nodeid, phases in reports.items():
        status = pytest_status(phases)
        if found.statuses.get(nodeid, status) != status:
            found.problems.append(f"{nodeid} was reported twice, with different outcomes")
        found.statuses[nodeid] = status


def _node_test(events: list[dict[str, Any]], found: Integrity) -> None:
    found.tap += [str(e.get("line", "")) for e in events if e.get("event") == "tap"]
    if not any(e.get("event") == "finish" for e in events):
        pid = events[0].get("peer_pid")
        found.problems.append(f"node --test (pid {pid}) never finished its run")


def _node_guard(events: list[dict[str, Any]], found: Integrity) -> None:
    start = events[0]
    argv = start.get("argv") or []
    where = f"pid {start.get('peer_pid')}, {argv[-1] if argv else '?'}"
    ends = [e for e in events if e.get("event") == "end"]
    if not ends:
        found.problems.append(
            f"a test process ({where}) ended without its guard's report: it exited early or "
            "was killed"
        )
    for end in ends:
        found.problems += [f"test process ({where}): {t}" for t in end.get("tampered") or ()]


def judge(
    records: list[dict[str, Any]],
    sites: list[str] | None = None,
    untrusted: list[str] | None = None,
) -> Integrity:
    """Read the witness's records; `sites` are the image's site directories holding pytest,
    `untrusted` where the code under test lives."""
    found = Integrity()
    if not any(r.get("event") == "listening" for r in records):
        found.problems.append("the witness process did not run")
    if any(r.get("event") == "garbled" for r in records):
        found.problems.append("something wrote to the witness what no runner sends")
    for conn, events in sorted(_sessions(records).items()):
        told = [e for e in events if e.get("event") not in ("open", "close")]
        if any(e.get("event") == "close" and e.get("partial") for e in events):
            found.problems.append(f"connection {conn} to the witness ended mid-message")
        if not told or told[0].get("event") != "start":
            pid = events[0].get("pid")
            found.problems.append(f"a process that is no runner wrote to the witness (pid {pid})")
            continue
        runner = told[0].get("runner")
        if runner == "pytest":
            _pytest(told, sites or [], untrusted or [], found)
        elif runner == "node-test":
            _node_test(told, found)
        elif runner == "node-guard":
            _node_guard(told, found)
            continue
        else:
            found.problems.append(f"an unknown runner {runner!r} wrote to the witness")
            continue
        found.runners.append(str(runner))
    return found
