"""Sandbox performance, measured side by side, with Orchard Env's methodology.

For each runtime: N sandboxes run concurrently, each create -> the four commands -> delete
(reference/orchard.md section 5: `python -c ...`, `ls /`, `cat /etc/os-release | head -1`, and the
same with a login shell). Reported: create (to ready) and exec p50/p90/p99, throughput in
commands per second of wall time, success rate. The same through the REST service (`pomona serve`
in its own process, with one worker and with two: the HTTP columns), and the Orchard runs side
by side with their ratio.
Then what a user would do instead: plain `docker run` and `docker exec` with the CLI; the docker
runtime under gVisor (isolation="gvisor") beside the CLI on runsc, for gVisor's cost. Then
snapshot and fork(8) of a 200 MB workspace.

    .venv/bin/python perf/sandbox_bench.py [--n-local 1000] [--n-http 1000] [--n-docker 50]
        [--n-gvisor 20] [--http-workers 1,2]

Prints one table; no assertion anywhere. Percentiles interpolate as Orchard's do: k=(n-1)p/100.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pomona import AsyncSandboxClient  # noqa: E402
from pomona.orchestrator.runtimes.local.enter import DEFAULT_PATH  # noqa: E402


@dataclass
class Target:
    """Where the sandboxes run: a runtime in-process, or a `pomona serve` over HTTP."""

    name: str
    runtime: str = "local"
    state: str | None = None
    url: str | None = None
    api_key: str | None = None


COMMANDS = [
    ("python3 -c 'import sys; print(f\"Python {sys.version}\")'", False),
    ("ls /", False),
    ("cat /etc/os-release | head -1", False),
    ("cat /etc/os-release | head -1", True),
]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ms(v: float) -> str:
    return f"{v * 1000:.1f}" if v == v else "n/a"


def client_for(target: Target) -> AsyncSandboxClient:
    if target.url:
        return AsyncSandboxClient(base_url=target.url, api_key=target.api_key)
    return AsyncSandboxClient(target.runtime, state_dir=target.state)


async def orchard_run(target: Target, image: str, n: int) -> dict:
    creates, execs, ok, errors = [], [], 0, []
    async with client_for(target) as client:
        # image unpacked / layers cached, as Orchard's pre-pulled nodes
        warm = await client.create_sandbox(image)
        await warm.delete()

        async def one(i: int) -> None:
            nonlocal ok
            try:
                t = time.perf_counter()
                sb = await client.create_sandbox(image, labels={"bench": "orchard"})
                creates.append(time.perf_counter() - t)
                for command, login in COMMANDS:
                    t = time.perf_counter()
                    r = await sb.exec(command, login_shell=login, timeout=120)
                    execs.append(time.perf_counter() - t)
                    if r.exit_code != 0:
                        raise RuntimeError(f"{command!r} exited {r.exit_code}: {r.stderr[:200]}")
                await sb.delete()
                ok += 1
            except Exception as e:  # a failure is data here
                errors.append(repr(e))

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - start
    return {"n": n, "creates": creates, "execs": execs, "ok": ok, "wall": wall, "errors": errors}


async def sequential(
    target: Target, image: str, count: int = 200
) -> tuple[list[float], list[float]]:
    """One at a time: the latency a single agent loop sees, without 2-core contention."""
    async with client_for(target) as client:
        creates = []
        for _ in range(min(count, 50)):
            t = time.perf_counter()
            sb = await client.create_sandbox(image)
            creates.append(time.perf_counter() - t)
            await sb.delete()
        sb = await client.create_sandbox(image)
        execs = []
        for _ in range(count):
            t = time.perf_counter()
            await sb.exec(["true"])
            execs.append(time.perf_counter() - t)
        return creates, execs


def docker_cli(image: str, n: int, runtime: str = "runc") -> tuple[list[float], list[float]]:
    """What a user would do instead: `docker run --rm` and `docker exec`, on one OCI runtime."""
    runs, execs = [], []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(
            ["docker", "run", "--rm", "--runtime", runtime, "--network", "none", image, "true"],
            check=True,
            capture_output=True,
        )
        runs.append(time.perf_counter() - t)
    name = f"pomona-bench-{os.getpid()}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--runtime", runtime, "--network", "none"]
        + [image, "sleep", "600"],
        check=True,
        capture_output=True,
    )
    try:
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run(["docker", "exec", name, "true"], check=True, capture_output=True)
            execs.append(time.perf_counter() - t)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return runs, execs


def container_columns(args: argparse.Namespace, state: Path, rows: list[tuple[str, ...]]) -> None:
    """The docker runtime, then the same under gVisor (isolation="gvisor", runsc on the ptrace
    platform), each beside the docker CLI on the same OCI runtime."""
    from tests.images import debian_image

    image = debian_image()
    runsc = (
        b'"runsc"'
        in subprocess.run(
            ["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True
        ).stdout
    )
    columns = [("docker", "runc", args.n_docker)]
    if runsc and args.n_gvisor:
        columns.append(("gvisor", "runsc", args.n_gvisor))
    for name, oci, n in columns:
        measure(Target(name, runtime=name, state=str(state / name)), image, n, rows)
        runs, execs = docker_cli(image, 30 if oci == "runc" else 10, oci)
        for what, values in (("docker run --rm true", runs), ("docker exec true", execs)):
            rows.append(
                (
                    f"docker CLI ({oci}): {what} (x{len(values)})",
                    ms(pct(values, 50)),
                    ms(pct(values, 90)),
                    ms(pct(values, 99)),
                    "",
                )
            )


async def snapshot_fork(target: Target, image: str) -> tuple[float, float, float]:
    async with client_for(target) as client:
        sb = await client.create_sandbox(image)
        r = await sb.exec(
            "mkdir -p /workspace/data && for i in $(seq 1 200); do "
            "head -c 1048576 /dev/urandom > /workspace/data/f$i; done; du -sm /workspace",
            timeout=600,
        )
        assert r.exit_code == 0, r.stderr
        t = time.perf_counter()
        snap = await sb.snapshot()
        snap_time = time.perf_counter() - t
        t = time.perf_counter()
        forks = await client.fork(snap, 8)
        fork_time = time.perf_counter() - t
        t = time.perf_counter()
        # counted by the shell's glob, not ls: Debian's runsc refuses coreutils' statx
        count = "set -- /workspace/data/*; echo $#"
        checks = await asyncio.gather(*(f.exec(count) for f in forks))
        check_time = time.perf_counter() - t
        assert all(c.stdout.strip() == "200" for c in checks)
        for f in forks:
            await f.delete()
        await sb.delete()
        await client.delete_snapshot(snap)
        return snap_time, fork_time, check_time


def chowned_copy(layers: list[str], target: Path, shift: int) -> tuple[float, int]:
    """What a layer cache chowned per id range would cost a range that meets an image first:
    a reflinked copy of each layer (XFS store) and every file's owner shifted into the range."""
    t = time.perf_counter()
    files = 0
    for i, layer in enumerate(layers):
        dest = target / str(i)
        subprocess.run(["cp", "-a", "--reflink=always", layer, str(dest)], check=True)
        for root, dirs, names in os.walk(dest):
            for name in [*dirs, *names]:
                st = os.lstat(os.path.join(root, name))
                os.lchown(os.path.join(root, name), st.st_uid + shift, st.st_gid + shift)
                files += 1
    return time.perf_counter() - t, files


async def idmap_vs_chown(state: Path, image: str) -> tuple[list[float], float, int]:
    """Sequential creates of an OCI image, whose layers are idmapped per sandbox, beside what
    chowning a copy of its layers for one range costs."""
    async with AsyncSandboxClient("local", state_dir=str(state)) as client:
        creates = []
        for _ in range(21):
            t = time.perf_counter()
            sb = await client.create_sandbox(image)
            creates.append(time.perf_counter() - t)
            await sb.delete()
        runtime = client._runtime  # type: ignore[attr-defined]
        layers = (await runtime.images.resolve(image)).layers
        target = Path(tempfile.mkdtemp(prefix="chowned-", dir=runtime.state))
        try:
            copy, files = chowned_copy(layers, target, 0x70000000)
        finally:
            shutil.rmtree(target, ignore_errors=True)
    return creates[1:], copy, files


def cpu_times() -> tuple[int, int]:
    """The machine's busy and total CPU time so far (jiffies, all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def busy_since(start: tuple[int, int]) -> float:
    """The share of the machine's CPU time that was busy since `start` (cpu_times())."""
    busy, total = cpu_times()
    return 100 * (busy - start[0]) / max(1, total - start[1])


async def bare_run(n: int) -> tuple[float, float]:
    """The floor: the four Orchard commands, N at once, as plain host processes (no sandbox,
    no runtime), wall seconds and machine CPU busy %. What the commands alone cost."""

    home = tempfile.mkdtemp(prefix="pomona-bench-home-")
    # the environment a sandbox's command gets (PATH, HOME), not this shell's: a version
    # manager's shims on the host's PATH would make every `python3` a script
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8"}

    async def one() -> None:
        for command, login in COMMANDS:
            proc = await asyncio.create_subprocess_exec(
                "bash", *(["-l"] if login else []), "-c", command, env=env, cwd=home,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await proc.wait()

    start, cpu = time.perf_counter(), cpu_times()
    try:
        await asyncio.gather(*(one() for _ in range(n)))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return time.perf_counter() - start, busy_since(cpu)


def measure(target: Target, image: str, n: int, rows: list[tuple[str, ...]]) -> dict | None:
    """The Orchard run, then the sequential and snapshot rows; the Orchard run's figures back."""
    load_before, cpu = os.getloadavg()[0], cpu_times()
    try:
        res = asyncio.run(orchard_run(target, image, n))
    except Exception as e:
        rows.append((f"pomona {target.name}: orchard full", "failed", repr(e)[:80]))
        return None
    res["load"], res["busy"] = (load_before, os.getloadavg()[0]), busy_since(cpu)
    rows.append(
        (
            f"pomona {target.name}: create-to-ready (N={n} concurrent)",
            ms(pct(res["creates"], 50)),
            ms(pct(res["creates"], 90)),
            ms(pct(res["creates"], 99)),
            "",
        )
    )
    rows.append(
        (
            f"pomona {target.name}: exec, 4 Orchard commands (N={n})",
            ms(pct(res["execs"], 50)),
            ms(pct(res["execs"], 90)),
            ms(pct(res["execs"], 99)),
            f"{len(res['execs']) / res['wall']:.0f} cmd/s, {100 * res['ok'] / n:.1f}% ok, "
            f"{res['wall']:.1f} s wall, CPU {res['busy']:.0f}% busy",
        )
    )
    if res["errors"]:
        rows.append((f"  first error ({len(res['errors'])})", res["errors"][0][:100]))
    seq_creates, seq = asyncio.run(sequential(target, image))
    res["seq_exec"] = seq
    rows.append(
        (
            f"pomona {target.name}: create-to-ready, sequential x50",
            ms(pct(seq_creates, 50)),
            ms(pct(seq_creates, 90)),
            ms(pct(seq_creates, 99)),
            "",
        )
    )
    rows.append(
        (
            f"pomona {target.name}: exec `true`, sequential x200",
            ms(pct(seq, 50)),
            ms(pct(seq, 90)),
            ms(pct(seq, 99)),
            "",
        )
    )
    try:
        snap, fork, check = asyncio.run(snapshot_fork(target, image))
        rows.append((f"pomona {target.name}: snapshot of 200 MB workspace", ms(snap), "", "", ""))
        rows.append(
            (
                f"pomona {target.name}: fork(8) from it, total",
                ms(fork),
                "",
                "",
                f"first exec in all 8: {ms(check)} ms",
            )
        )
    except Exception as e:
        rows.append((f"pomona {target.name}: snapshot/fork", "failed", repr(e)[:80]))
    return res


def side_by_side(local: dict, http: dict, http_name: str) -> list[tuple[str, ...]]:
    """The same Orchard run in-process and through the service, and the ratio."""

    def row(what: str, pick, fmt: str = "{:.1f}") -> tuple[str, ...]:
        a, b = pick(local), pick(http)
        return (what, fmt.format(a), fmt.format(b), f"{b / a:.2f}x" if a else "")

    return [
        ("Orchard run, same N", "in-process", http_name, "ratio"),
        row("N sandboxes", lambda r: r["n"], "{:.0f}"),
        row("wall s", lambda r: r["wall"]),
        row("commands/s", lambda r: len(r["execs"]) / r["wall"]),
        row("success %", lambda r: 100 * r["ok"] / r["n"]),
        row("create-to-ready p50 s", lambda r: pct(r["creates"], 50), "{:.2f}"),
        row("exec p50 s", lambda r: pct(r["execs"], 50), "{:.3f}"),
        row("exec p90 s", lambda r: pct(r["execs"], 90), "{:.3f}"),
        row("exec `true` sequential p50 ms", lambda r: 1000 * pct(r["seq_exec"], 50), "{:.2f}"),
        row("machine CPU busy %", lambda r: r["busy"], "{:.0f}"),
        row("load average before / after", lambda r: r["load"][0], "{:.0f}"),
    ]


async def with_live(state: Path, live: int = 300, k: int = 20) -> dict[str, float]:
    """Whether a create costs more the more sandboxes live: host mounts (every new mount
    namespace copies the host's table) and sequential create p50, with none and `live` alive."""

    def host_mounts() -> float:
        return float(len(Path("/proc/self/mountinfo").read_text().splitlines()))

    async with AsyncSandboxClient("local", state_dir=str(state)) as client:

        async def creates() -> float:
            times = []
            for _ in range(k):
                t = time.perf_counter()
                sb = await client.create_sandbox("host")
                times.append(time.perf_counter() - t)
                await sb.delete()
            return pct(times, 50)

        out = {"mounts_none": host_mounts(), "create_none": await creates()}
        alive = [await client.create_sandbox("host") for _ in range(live)]
        out |= {"mounts_live": host_mounts(), "create_live": await creates()}
        await asyncio.gather(*(sb.delete() for sb in alive))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-local", type=int, default=1000)
    parser.add_argument("--n-http", type=int, default=1000)
    parser.add_argument("--n-docker", type=int, default=50)
    parser.add_argument("--n-gvisor", type=int, default=20, help="0 skips the gVisor column")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--redis", action="store_true", help="the service's store in a real Redis")
    parser.add_argument(
        "--http-workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="the service's runs: `pomona serve --workers N` for each N (comma-separated)",
    )
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="pomona-bench-"))
    try:
        run_all(args, state)
    finally:
        remove_unless_mounted(state)


def remove_unless_mounted(state: Path) -> None:
    """The bench's state (stores, disk images: hundreds of MB), once nothing there is mounted
    (every client unmounts its store on close); kept, saying so, if something still is."""
    with open("/proc/self/mounts") as f:
        held = [line.split()[1] for line in f if line.split()[1].startswith(str(state))]
    if held:
        print(f"left {state}: still mounted there: {', '.join(held)}", file=sys.stderr)
    else:
        shutil.rmtree(state, ignore_errors=True)


def run_all(args: argparse.Namespace, state: Path) -> None:
    rows: list[tuple[str, ...]] = []
    engine = bool(shutil.which("docker")) and (
        subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )
    have_docker = engine and not args.skip_docker

    wall, busy = asyncio.run(bare_run(args.n_local))
    rows.append(
        (
            f"bare host: the 4 commands, N={args.n_local} at once, no sandbox",
            "",
            "",
            "",
            f"{4 * args.n_local / wall:.0f} cmd/s, {wall:.1f} s wall, CPU {busy:.0f}% busy",
        )
    )
    time.sleep(30)  # the machine settles before the next run
    local = measure(Target("local", state=str(state / "local")), "host", args.n_local, rows)
    live = asyncio.run(with_live(state / "live"))
    rows.append(
        (
            "pomona local: create-to-ready, sequential x20, 300 alive",
            ms(live["create_live"]),
            "",
            "",
            f"none alive: {ms(live['create_none'])} ms; host mounts "
            f"{live['mounts_none']:.0f} -> {live['mounts_live']:.0f}",
        )
    )
    if engine:  # the test image comes from the engine's store
        from tests.images import debian_image

        creates, copy, files = asyncio.run(idmap_vs_chown(state / "local", debian_image()))
        rows.append(
            (
                "pomona local: create-to-ready, Debian image x20",
                ms(pct(creates, 50)),
                ms(pct(creates, 90)),
                ms(pct(creates, 99)),
                "its layers idmapped per sandbox",
            )
        )
        rows.append(
            (
                "  instead: its layers copied and chowned for one id range",
                ms(copy),
                "",
                "",
                f"{files} files; once per range and image",
            )
        )
    https: list[tuple[str, dict]] = []
    if not args.skip_http:
        from tests.service.harness import KEYS, RedisServer, Replica, unmount

        # `pomona serve` in its own process(es) on loopback, SQLite (or Redis) store, an API
        # key; admission control queues the burst (16 concurrent creates) instead of refusing it
        for workers in args.http_workers:
            redis = RedisServer().start() if args.redis else None
            server = Replica(  # the bench's tenant runs N sandboxes at once: no quota
                state / f"http{workers}",
                redis.url if redis else None,
                max_creates=16,
                max_execs=256,
                queue=5000,
                quota=None,
                workers=workers,
            ).start()
            try:
                time.sleep(30)  # the previous run's sandboxes are reaped: each run starts settled
                name = (
                    ("http+redis" if redis else "http")
                    + f", {workers} worker"
                    + "s" * (workers > 1)
                )
                result = measure(
                    Target(name, url=server.url, api_key=KEYS["alice"]), "host", args.n_http, rows
                )
                if result:
                    https.append((name, result))
            finally:
                server.stop()
                unmount(state / f"http{workers}")
                if redis:
                    redis.close()
    if have_docker:
        container_columns(args, state, rows)
    rows.append(
        ("Orchard Env (published): exec average", "280", "", "", "k8s; 1,000 sandboxes in 26 s")
    )
    rows.append(("Orchard Env (published): create average", "11750", "", "", "~154 cmd/s"))

    print(
        f"\nmachine: {platform.node()} {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
        f"kernel {platform.release()}, Python {platform.python_version()}\n"
    )
    header = ("what", "p50 ms", "p90 ms", "p99 ms", "notes")
    widths = [max(len(str(r[i])) if i < len(r) else 0 for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print(" | ".join(str(row[i] if i < len(row) else "").ljust(widths[i]) for i in range(5)))
    for name, http in https if local else []:
        compared = side_by_side(local, http, name)
        compared[-1] = (
            *compared[-1][:1],
            f"{local['load'][0]:.0f} / {local['load'][1]:.0f}",
            f"{http['load'][0]:.0f} / {http['load'][1]:.0f}",
            "",
        )
        widths = [max(len(r[i]) for r in compared) for i in range(4)]
        print()
        for row in compared:
            print(" | ".join(row[i].ljust(widths[i]) for i in range(4)))
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(state / "local").unmount_store()


if __name__ == "__main__":
    main()
