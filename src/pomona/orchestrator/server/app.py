"""`pomona serve`: the REST API over a Coordinator. Routes are thin (routes/, one router per
domain); every rule lives below them, and errors are answered in one place (errors.py).

Compatible with Orchard Env's documented routes (reference/orchard.md §2), plus listing by label,
streaming exec (NDJSON), snapshot, fork, port tunnels, job cancel, tar transfer and raw files.
Errors are `{"error": <class>, "detail": <what to fix>, "request_id"}` with the class's status:
401/403 auth, 404 unknown, 408 only for an expired server-side wait, 409 conflict, 413 too large,
422 invalid, 503 + Retry-After when overloaded or when the store is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from pomona.keys import parse_keys
from pomona.orchestrator.runtimes import make_runtime, runtime_kind
from pomona.orchestrator.server.admission import Admission
from pomona.orchestrator.server.coordinator import Coordinator
from pomona.orchestrator.server.envelope import RequestEnvelope
from pomona.orchestrator.server.errors import add_handlers
from pomona.orchestrator.server.keys import KeyRing
from pomona.orchestrator.server.metrics import count_across_processes, instrument
from pomona.orchestrator.server.policy import DEFAULT_QUOTA, FILE_OPS_PER_KEY, TenantPolicy
from pomona.orchestrator.server.quotas import Quota, parse_quota
from pomona.orchestrator.server.routes import files, jobs, probes, sandboxes, sessions, snapshots
from pomona.orchestrator.server.state import ServiceState
from pomona.orchestrator.server.store import open_store
from pomona.orchestrator.server.timing import Timing
from pomona.orchestrator.server.workers import Supervisor, listening_sockets
from pomona.orchestrator.sources import ImageSources
from pomona.orchestrator.types import DEFAULT_LIMITS, Limits, parse_bytes, validated

log = logging.getLogger("pomona.service")
MAX_BODY = 512 * 2**20
WORKERS = 64
MAX_CREATES = 32  # creates at once before admission queues them
MAX_EXECS = 512  # commands at once, likewise
QUEUE = 2000  # requests admission holds before it answers 503
BACKLOG = 2048  # connections the kernel queues before uvicorn accepts them


def create_app(
    coordinator: Coordinator,
    keys: KeyRing,
    *,
    max_creates: int = MAX_CREATES,
    max_execs: int = MAX_EXECS,
    queue: int = QUEUE,
    max_body: int = MAX_BODY,
    policy: TenantPolicy | None = None,
) -> FastAPI:
    """The service over one coordinator: its routers, with their state in `app.state.service`.
    The lifespan starts and stops the coordinator."""
    state = ServiceState(
        coordinator,
        keys,
        policy or TenantPolicy(),
        creates=Admission("create", max_creates, queue),
        execs=Admission("exec", max_execs, queue),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # blocking work (files, builds) runs on threads: enough of them that one key's bounded
        # share (policy.file_ops_per_key) never takes them all (the default is cores + 4)
        workers = ThreadPoolExecutor(
            max(WORKERS, 4 * state.policy.file_ops_per_key), "pomona-worker"
        )
        asyncio.get_running_loop().set_default_executor(workers)
        await coordinator.start()
        try:
            yield
        finally:
            await coordinator.close()

    app = FastAPI(
        title="Pomona sandbox service",
        version=probes.VERSION,
        lifespan=lifespan,
        description=__doc__,
    )
    app.state.service = state
    add_handlers(app)
    for router in (probes, sandboxes, jobs, sessions, files, snapshots):
        app.include_router(router.router)
    app.add_middleware(RequestEnvelope, max_body=max_body)
    instrument(app, coordinator)  # GET /metrics, operation timings, admission rejections
    return app


# -- running it -------------------------------------------------------------------------------


def build(
    runtime: str = "local",
    state_dir: str = "/var/lib/pomona",
    redis_url: str | None = None,
    api_keys: dict[str, str] | None = None,
    admins: set[str] | None = None,
    timing: Timing | None = None,
    *,
    mount_sources: list[str] | None = None,
    image_dirs: list[str] | None = None,
    registries: list[str] | None = None,
    file_ops_per_key: int = FILE_OPS_PER_KEY,
    quota: Quota | None = DEFAULT_QUOTA,
    quotas: dict[str, Quota] | None = None,
    default_limits: Limits = DEFAULT_LIMITS,
    **app_options: Any,
) -> FastAPI:
    """The whole service from settings: runtime, store, coordinator, app. Tenants get host
    mounts under `mount_sources` only, images from `image_dirs` and `registries` only, and hold
    at most their quota (`quota`, None for none, or theirs in `quotas`); every sandbox gets `default_limits`
    for what it does not set."""
    from pomona.orchestrator.service import SandboxService

    sources = ImageSources.restricted(image_dirs, registries)
    service = SandboxService(  # the coordinator reaps; creates at once as admission allows
        make_runtime(runtime, state_dir, sources=sources),
        reap_interval=10**9,
        max_creates=app_options.get("max_creates", MAX_CREATES),
        default_limits=default_limits,
    )
    policy = TenantPolicy.of(mount_sources, file_ops_per_key, quota, quotas)
    coordinator = Coordinator(
        service, open_store(redis_url, state_dir), timing, quotas=policy.quota_for
    )
    ring = KeyRing(api_keys, frozenset(admins if admins is not None else {"admin"}))
    return create_app(coordinator, ring, policy=policy, **app_options)


def _loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    runtime: str = "local",
    state_dir: str = "/var/lib/pomona",
    redis_url: str | None = None,
    workers: int = 1,
    **options: Any,
) -> None:
    """Run until stopped, in `workers` processes on one port (workers.py). Keys come from
    POMONA_API_KEYS; without keys only loopback is served."""
    import uvicorn

    keys = parse_keys(os.environ.get("POMONA_API_KEYS"), "POMONA_API_KEYS") or None
    if keys is None and not _loopback(host):
        raise SystemExit(
            f"refusing to serve {host} without API keys: set POMONA_API_KEYS=name:key,..."
        )
    if keys is None:
        log.warning("no POMONA_API_KEYS: authentication is off (loopback only)")
    admins = set(os.environ.get("POMONA_ADMIN_KEYS", "admin").replace(",", " ").split())
    if workers == 1:
        app = build(runtime, state_dir, redis_url, keys, admins, **options)
        uvicorn.Server(_uvicorn_config(app, host=host, port=port)).run()
        return
    if workers < 1:
        raise SystemExit(f"--workers {workers}: give 1 or more")
    if not runtime_kind(runtime).shared_state:
        raise SystemExit(
            f"--workers {workers}: the {runtime} runtime cannot share its sandboxes between "
            "processes; serve it with --workers 1"
        )
    for name, default in (("max_creates", MAX_CREATES), ("max_execs", MAX_EXECS), ("queue", QUEUE)):
        options[name] = -(-options.get(name, default) // workers)  # the service's, split

    counts = tempfile.TemporaryDirectory(prefix="pomona-metrics-")  # every worker's, one scrape

    def run_worker(sock: socket.socket, ready: Callable[[], object]) -> None:
        count_across_processes(counts.name)
        server = uvicorn.Server(
            _uvicorn_config(build(runtime, state_dir, redis_url, keys, admins, **options))
        )

        async def main() -> None:
            serving = asyncio.ensure_future(server.serve(sockets=[sock]))
            while not (server.started or serving.done()):
                await asyncio.sleep(0.05)
            if server.started:
                ready()
            await serving

        asyncio.run(main())

    with counts:
        try:
            sockets = listening_sockets(host, port, workers, BACKLOG)
        except OSError as e:
            raise SystemExit(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        code = Supervisor(sockets, run_worker).run()
    raise SystemExit(code)


def _uvicorn_config(app: FastAPI, **where: Any) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        backlog=BACKLOG,
        timeout_keep_alive=120,
        log_level="warning",
        ws_max_size=4 * 2**20,
        **where,
    )


def add_serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`pomona serve`; its parser sets `func`, as cli.py expects."""
    p = subparsers.add_parser("serve", help="run the sandbox service (REST API)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--runtime", default="local", choices=["local", "docker", "podman", "gvisor", "kubernetes"]
    )
    p.add_argument("--state-dir", default="/var/lib/pomona", help="sandboxes and the SQLite store")
    p.add_argument("--redis", metavar="URL", help="share state with other replicas through Redis")
    p.add_argument(
        "--max-creates", type=int, default=MAX_CREATES, help="concurrent creates before queueing"
    )
    p.add_argument(
        "--max-execs", type=int, default=MAX_EXECS, help="concurrent execs before queueing"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="service processes on the port, sharing the state dir and store (one answers "
        "requests on about one core; the maxima above are the service's, split among them)",
    )
    p.add_argument(
        "--mount-source",
        action="append",
        default=[],
        metavar="DIR",
        help="a host directory tenants may mount from (repeatable; admins may mount any)",
    )
    p.add_argument(
        "--image-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory image archives may be read from (repeatable)",
    )
    p.add_argument(
        "--registry",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a registry images may be pulled from (repeatable)",
    )
    p.add_argument(
        "--max-file-ops-per-key",
        type=int,
        default=FILE_OPS_PER_KEY,
        help="concurrent file operations of one API key before 503",
    )
    add_quota_arguments(p)
    p.set_defaults(func=serve_command)
    return p


def _maximum(value: str, size: bool = False) -> float | None:
    """A maximum from the command line: 0 or "none" is none."""
    if value in ("0", "none"):
        return None
    parsed = parse_bytes(value) if size else float(value)
    return None if parsed is None else float(parsed)


def add_quota_arguments(p: argparse.ArgumentParser) -> None:
    """What one tenant key may hold, and what a sandbox gets for the limits it does not set."""
    q = Quota()
    p.add_argument(
        "--max-sandboxes-per-key",
        default=str(q.sandboxes),
        metavar="N",
        help="live sandboxes one tenant key may hold (0: no maximum)",
    )
    p.add_argument(
        "--max-cpu-per-key",
        default="none",
        metavar="CORES",
        help="the CPU limits of one key's live sandboxes, summed (default: no maximum)",
    )
    p.add_argument(
        "--max-memory-per-key",
        default="none",
        metavar="SIZE",
        help="their memory limits, summed, e.g. 64Gi (default: no maximum)",
    )
    p.add_argument(
        "--max-ttl",
        default=f"{q.ttl:g}",
        metavar="SECONDS",
        help="the longest TTL a tenant's sandbox may have; null asks for this (0: the service's 7 days)",
    )
    p.add_argument(
        "--key-quota",
        action="append",
        default=[],
        metavar="NAME:K=V,...",
        help="one key's own quota, e.g. alice:sandboxes=500,memory=1Ti (repeatable)",
    )
    p.add_argument(
        "--default-limits",
        default=None,
        metavar="K=V,...|none",
        help="what a sandbox gets for each limit it does not set (default "
        "cpu=2,memory=4Gi,pids=4096,disk=10Gi where the runtime caps disks; none: no defaults)",
    )


def quota_settings(args: argparse.Namespace) -> dict[str, Any]:
    """build()'s quota and default-limit settings from `pomona serve`'s arguments."""
    sandboxes = _maximum(args.max_sandboxes_per_key)
    quota = Quota(
        sandboxes=None if sandboxes is None else int(sandboxes),
        cpu=_maximum(args.max_cpu_per_key),
        memory=None if (m := _maximum(args.max_memory_per_key, size=True)) is None else int(m),
        ttl=_maximum(args.max_ttl),
    )
    quotas = dict(parse_quota(text, quota) for text in args.key_quota)
    unbounded = all(getattr(quota, f.name) is None for f in dataclasses.fields(quota))
    if args.default_limits is None:
        defaults = DEFAULT_LIMITS
    elif args.default_limits == "none":
        defaults = Limits()
    else:
        pairs = (item.partition("=") for item in args.default_limits.split(","))
        defaults = validated(Limits, **{k: v for k, _, v in pairs})
    return {"quota": None if unbounded else quota, "quotas": quotas, "default_limits": defaults}


def serve_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(
        args.host,
        args.port,
        args.runtime,
        args.state_dir,
        args.redis,
        args.workers,
        max_creates=args.max_creates,
        max_execs=args.max_execs,
        mount_sources=args.mount_source,
        image_dirs=args.image_dir,
        registries=args.registry,
        file_ops_per_key=args.max_file_ops_per_key,
        **quota_settings(args),
    )
    return 0


def main() -> int:
    """`python -m pomona.orchestrator.server.app ...`: the same as `pomona serve ...`."""
    parser = argparse.ArgumentParser(prog="pomona")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *sys.argv[1:]])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
