"""The local runtime as an ordinary user beside the same runtime as root (issue 29).

Same image (the suite's Debian image as a `docker save` archive), same measurements as
perf/sandbox_bench.py's sequential rows and its snapshot/fork row: creates one at a time, exec
`true`, a 200 MB workspace snapshotted and forked 8 times. As root the runtime is in-process;
as the user (the suite's rootless user, tests/conformance/test_rootless.py, run through setpriv)
the SDK talks to its worker over loopback HTTP, so each call also crosses the REST API; the
"user, no worker" rows run the same in-process in the user's namespace, without that hop. The
first create of each unpacks the image (once per state directory as root, once per user
rootless); it is left out of the figures.

    .venv/bin/python perf/rootless_bench.py [--count 200]    # as root

Prints one table; no assertion anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf.sandbox_bench import Target, ms, pct, sequential, snapshot_fork  # noqa: E402
from pomona import AsyncSandboxClient  # noqa: E402


async def figures(state: str, image: str, count: int) -> dict:
    async with AsyncSandboxClient("local", state_dir=state) as client:
        await (await client.create_sandbox(image)).delete()  # the image, unpacked once
    target = Target("local", state=state)
    creates, execs = await sequential(target, image, count)
    snapshot, forks, first_exec = await snapshot_fork(target, image)
    return {
        "creates": creates,
        "execs": execs,
        "snapshot": snapshot,
        "fork": forks,
        "first_exec": first_exec,
    }


def in_the_namespace(state: str, count: int) -> dict:
    """The user's half without the worker: this script, in-process, as root of the user's
    namespace (what the worker runs), so the REST hop's share of the figures shows."""
    from pomona.orchestrator.linux.helpers import helper
    from pomona.orchestrator.runtimes.local import rootless

    root = Path(state)
    pid = rootless.hold(root)
    try:
        argv = [helper("pomona-init"), "enter", str(pid), sys.executable, __file__]
        argv += ["--measure", state, "--count", str(count)]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.splitlines()[-1])
    finally:
        rootless.release(root)


def as_the_user(image: str, count: int, how: str) -> dict:
    from tests.conformance.test_rootless import _run_as, _user

    user = _user()
    tmp = Path(tempfile.mkdtemp(prefix="pomona-rootless-bench-", dir="/tmp"))
    os.chown(tmp, user.pw_uid, user.pw_gid)
    try:
        argv = [sys.executable, __file__, how, str(tmp / "state"), "--count", str(count)]
        done = _run_as(user.pw_uid, user.pw_gid, {"HOME": user.pw_dir, "TMPDIR": str(tmp)}, argv)
        if done.returncode:
            raise SystemExit(f"the rootless run failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.splitlines()[-1])
    finally:
        _run_as(user.pw_uid, user.pw_gid, {}, ["rm", "-rf", str(tmp)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the user's half: prints JSON
    parser.add_argument("--in-namespace", help=argparse.SUPPRESS)  # the same, without the worker
    args = parser.parse_args()
    if args.in_namespace:
        print(json.dumps(in_the_namespace(args.in_namespace, args.count)))
        return
    from tests.conformance.test_rootless import _image_archive

    image = f"docker-archive:{_image_archive()}"
    if args.measure:
        print(json.dumps(asyncio.run(figures(args.measure, image, args.count))))
        return
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from tests.conftest import SESSION_TMP  # importing the tests made it this process's TMPDIR

    state = tempfile.mkdtemp(prefix="pomona-rootless-bench-")
    try:
        try:
            columns = {"root": asyncio.run(figures(f"{state}/local", image, args.count))}
        finally:
            LocalRuntime(f"{state}/local").unmount_store()
        columns["ordinary user"] = as_the_user(image, args.count, "--measure")
        columns["user, no worker"] = as_the_user(image, args.count, "--in-namespace")
    finally:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)
    print(f"\nlocal runtime, Debian image, load {os.getloadavg()[0]:.1f} at the end\n")
    print("what".ljust(42), "| p50 ms | p90 ms | p99 ms")
    for name, f in columns.items():
        for what, values in (
            (f"create, sequential x{len(f['creates'])}", f["creates"]),
            (f"exec `true`, sequential x{len(f['execs'])}", f["execs"]),
        ):
            row = [ms(pct(values, p)) for p in (50, 90, 99)]
            print(f"{name}: {what}".ljust(42), "|", " | ".join(v.ljust(6) for v in row))
        print(
            f"{name}: snapshot 200 MB / fork(8)".ljust(42),
            f"| {ms(f['snapshot'])} / {ms(f['fork'])} (first exec in all 8: {ms(f['first_exec'])})",
        )


if __name__ == "__main__":
    main()
