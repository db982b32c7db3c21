"""Sidecar services: the services of a task's environment/docker-compose.yaml besides `main`,
each in a sandbox of its own (its own image, processes and files, which the agent cannot touch),
reached from the agent's sandbox at `<name>:<port>`, as on a compose network.

No runtime joins two sandboxes' networks, so a relay does it over the sandbox API. Each service
gets a loopback address of its own in the agent's sandbox, named in its /etc/hosts; there the
relay (terminal_bench/relay.py, run as root by the sandbox's python3) listens on the service's
ports. A bridge here keeps a few channels open to the relay (`Sandbox.connect`); each connection
the agent makes takes one, says which address and port it came to, and the bridge joins it to
the service's sandbox (`connect` again). The bridge of the sandbox that owns the services
deletes them once that sandbox is gone, whatever ended it.

What Pomona reads of a service: `image` (or, for Pomona's offline tasks, `x-pomona.image`, as
`pomona_image` stands in for building the main image, with `x-pomona.copy` naming files of the
environment directory to copy in, as the service's Dockerfile would), `entrypoint` and
`command` (one of them is required: Pomona does not read an image's own ENTRYPOINT/CMD),
`environment`, `expose` / `ports` (the ports relayed; one is required), `user`, `working_dir`,
`healthcheck` (Docker's semantics; without one, Pomona waits until every port answers),
`depends_on` (the start order), and relative bind `volumes` (copied in: a copy, not a mount).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.task import TaskSetupFailed
from pomona.benchmarks.terminal_bench.archives import tar_of
from pomona.benchmarks.terminal_bench.config import Healthcheck, resolve_env
from pomona.errors import Unknown, UsageError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient, SyncConnection

RELAY = Path(__file__).with_name("relay.py")
RELAY_PATH = "/tmp/pomona-relay.py"
FIRST_HOST = 10  # a group's services: 127.A.B.10, 127.A.B.11, ... (A.B drawn per group)
POOL = 4  # idle channels kept open to each relay
MAX_ROUTE = 256  # the longest route line a relay may send
_REFUSED_KEYS = ("privileged", "cap_add", "devices", "network_mode", "pid", "ipc")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")


def _seconds(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, int | float):
        return float(value)
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = _DURATION.findall(str(value))
    if not parts or "".join(n + u for n, u in parts) != str(value).replace(" ", ""):
        raise UsageError(f"not a duration: {value!r}")
    return sum(float(n) * units[u] for n, u in parts)


def _command(value: Any) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


@dataclass(frozen=True)
class Service:
    name: str
    image: str
    command: tuple[str, ...]
    ports: tuple[int, ...]
    env: dict[str, str] = field(default_factory=dict)
    user: str = "root"
    workdir: str = "/"
    healthcheck: Healthcheck | None = None
    copies: tuple[tuple[Path, str], ...] = ()  # (a path in the task, where it goes)


def read_services(task_dir: Path) -> tuple[Service, ...]:
    """The sidecars of environment/docker-compose.yaml, in the order they must start; what
    Pomona cannot honour is refused with the reason."""
    path = task_dir / "environment" / "docker-compose.yaml"
    if not path.is_file():
        return ()
    import yaml

    def fail(message: str) -> UsageError:
        return UsageError(f"{path}: {message}")

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise fail(f"not valid YAML: {e}") from None
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict):
        raise fail("no services")
    specs = {k: v or {} for k, v in services.items() if k != "main"}
    out: dict[str, Service] = {}

    def add(name: str, chain: tuple[str, ...] = ()) -> None:
        if name in out:
            return
        if name in chain:
            raise fail(f"services depend on each other in a cycle: {' -> '.join(chain + (name,))}")
        spec = specs[name]
        needs = spec.get("depends_on") or []
        for other in needs if isinstance(needs, list) else list(needs):
            if other in specs:
                add(other, chain + (name,))
        out[name] = _service(name, spec, path.parent, fail)

    for name in specs:
        if not isinstance(specs[name], dict):
            raise fail(f"service {name!r} is not a mapping")
        add(name)
    return tuple(out.values())


def _service(
    name: str, spec: dict[str, Any], env_dir: Path, fail: Callable[[str], ValueError]
) -> Service:
    where = f"service {name!r}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise fail(f"{where}: not a valid service name")
    if refused := [k for k in _REFUSED_KEYS if spec.get(k)]:
        raise fail(f"{where} asks for {', '.join(refused)}, which a Pomona sandbox cannot grant")
    extra = spec.get("x-pomona") or {}
    image = extra.get("image") or spec.get("image")
    if not image:
        raise fail(
            f"{where} has no image: Pomona does not build images (name one, or x-pomona.image)"
        )
    command = _command(spec.get("entrypoint")) + _command(spec.get("command"))
    if not command:
        raise fail(
            f"{where} names no entrypoint or command: Pomona does not read an image's "
            "own ENTRYPOINT/CMD"
        )
    ports = []
    for entry in (*(spec.get("expose") or ()), *(spec.get("ports") or ())):
        target = entry.get("target") if isinstance(entry, dict) else str(entry).split(":")[-1]
        ports.append(int(str(target).split("/")[0]))
    if not ports:
        raise fail(f"{where} lists no port under expose or ports: Pomona relays those only")
    env = spec.get("environment") or {}
    if isinstance(env, list):
        env = {name: value for name, _, value in (str(e).partition("=") for e in env)}
    copies = [(env_dir / src, dst) for src, dst in (extra.get("copy") or {}).items()]
    for volume in spec.get("volumes") or ():
        src, _, rest = (
            str(volume).partition(":")
            if isinstance(volume, str)
            else (volume.get("source", ""), "", volume.get("target", ""))
        )
        dst = rest.split(":")[0] if isinstance(volume, str) else rest
        if not src.startswith("."):
            raise fail(
                f"{where}: volume {volume!r} is not a path in the task (only those are copied in)"
            )
        copies.append((env_dir / src, dst))
    for src, _ in copies:
        if not src.resolve().is_relative_to(env_dir.resolve()) or not src.exists():
            raise fail(f"{where}: {src} is not a file or directory of environment/")
    return Service(
        name=name,
        image=str(image),
        command=tuple(command),
        ports=tuple(ports),
        env=resolve_env({str(k): str(v) for k, v in env.items()}),
        user="root" if str(spec.get("user", "root")).split(":")[0] in ("root", "0") else "pomona",
        workdir=spec.get("working_dir") or "/",
        healthcheck=_healthcheck(spec.get("healthcheck"), where, fail),
        copies=tuple(copies),
    )


def _healthcheck(spec: Any, where: str, fail: Callable[[str], ValueError]) -> Healthcheck | None:
    if not spec or spec.get("disable"):
        return None
    test = spec.get("test")
    if isinstance(test, list) and test and test[0] == "NONE":
        return None
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
        command = shlex.join(test[1:]) if test[0] == "CMD" else " ".join(test[1:])
    elif isinstance(test, str):
        command = test
    else:
        raise fail(f"{where}: healthcheck.test must be CMD, CMD-SHELL or a command string")
    try:
        return Healthcheck(
            command,
            interval=_seconds(spec.get("interval"), 30.0),
            timeout=_seconds(spec.get("timeout"), 30.0),
            start_period=_seconds(spec.get("start_period"), 0.0),
            start_interval=_seconds(spec.get("start_interval"), 5.0),
            retries=int(spec.get("retries", 3)),
        )
    except ValueError as e:
        raise fail(f"{where}: healthcheck: {e}") from None


# --- running them ------------------------------------------------------------------------------


class ServiceGroup:
    """The running sidecars of one sandbox's environment (the agent's, or a separate verifier's)."""

    def __init__(self, services: tuple[Service, ...], ttl: float):
        self.services = services
        self.sandboxes: dict[str, Sandbox] = {}  # name -> its sandbox
        # drawn, so that relays in sandboxes sharing the host's network (`full` on the local
        # runtime) never collide
        net = secrets.randbelow(254 * 254)
        base = f"127.{1 + net // 254}.{1 + net % 254}"
        self.addresses = {s.name: f"{base}.{FIRST_HOST + i}" for i, s in enumerate(services)}
        self._bridges: list[_Bridge] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._beat = threading.Thread(
            target=self._heartbeats, args=(ttl,), daemon=True, name="pomona-tb-services"
        )

    @classmethod
    def start(
        cls,
        services: tuple[Service, ...],
        client: SandboxClient,
        ttl: float,
        labels: dict[str, str],
    ) -> ServiceGroup:
        """Each service in a sandbox of its own with no network: it is reached through the
        relay, and a `full` one would share the host's network on the local runtime, where two
        episodes' services would take the same ports."""
        group = cls(services, ttl)
        try:
            for s in services:
                group.sandboxes[s.name] = sandbox = client.create_sandbox(
                    s.image,
                    network="none",
                    user=s.user,
                    workdir=s.workdir,
                    env=s.env,
                    timeout=ttl,
                    labels={**labels, "purpose": "tb-service", "service": s.name},
                )
                _launch(s, sandbox)
        except BaseException:
            group.close()
            raise
        group._beat.start()
        return group

    def _heartbeats(self, ttl: float) -> None:
        """The services live as long as the sandbox that owns them, however long its turns."""
        while not self._closed.wait(ttl / 3):
            for sandbox in list(self.sandboxes.values()):
                with contextlib.suppress(Exception):
                    sandbox.heartbeat()

    def sandbox_of(self, name: str) -> Sandbox:
        if name not in self.sandboxes:
            raise Unknown(f"no sidecar service {name!r}")
        return self.sandboxes[name]

    def attach(self, sandbox: Sandbox, owner: bool) -> None:
        """Make the services reachable from `sandbox` at their names; the owner's going deletes
        them."""
        hosts = "".join(f"{self.addresses[s.name]} {s.name}\\n" for s in self.services)
        routes = [f"{self.addresses[s.name]}:{p}" for s in self.services for p in s.ports]
        log = "/tmp/pomona-relay.log"
        sandbox.write_file(RELAY_PATH, RELAY.read_bytes())
        start = (
            "command -v python3 >/dev/null || { echo 'sidecar services need python3 in the "
            "task image (for the relay)' >&2; exit 3; }; "
            f"grep -q ' {self.services[0].name}$' /etc/hosts || printf '{hosts}' >> /etc/hosts; "
            f"chmod 644 {RELAY_PATH}; rm -f {log}; "
            f"(setsid python3 {RELAY_PATH} {' '.join(routes)} > {log} 2>&1 < /dev/null &); "
            f"for i in $(seq 300); do grep -q '^ready' {log} 2>/dev/null && break; sleep 0.1; done; "
            f"cat {log}"
        )
        done = sandbox.exec(start, user="root", timeout=120)
        ready = re.search(r"^ready (\d+)$", done.stdout, re.M)
        if done.exit_code != 0 or not ready:
            raise TaskSetupFailed(
                f"the service relay did not start: {done.stderr.strip()} {done.stdout.strip()}"
            )
        by_route = {
            f"{self.addresses[s.name]}:{p}".encode(): (self.sandboxes[s.name], p)
            for s in self.services
            for p in s.ports
        }
        bridge = _Bridge(
            sandbox, int(ready.group(1)), by_route, on_gone=self.close if owner else None
        )
        self._bridges.append(bridge)

    def close(self) -> None:
        self._closed.set()
        for bridge in self._bridges:
            bridge.stop()
        with self._lock:
            sandboxes, self.sandboxes = list(self.sandboxes.values()), {}
        for sandbox in sandboxes:
            with contextlib.suppress(Exception):
                sandbox.delete()


def _launch(s: Service, sandbox: Sandbox) -> None:
    """Copy the service's files in, start its command in the background, wait until healthy."""
    for src, dst in s.copies:
        target = dst if src.is_dir() else str(Path(dst).parent)
        sandbox.exec(f"mkdir -p {shlex.quote(target)}", user="root", timeout=60)
        if src.is_dir():
            sandbox.upload_dir(dst, tar_of(src))
        else:
            sandbox.write_file(dst, src.read_bytes())
    log = "/tmp/pomona-service.log"
    started = sandbox.exec(
        f"(setsid {shlex.join(s.command)} > {log} 2>&1 < /dev/null &)", cwd=s.workdir, timeout=60
    )
    if started.exit_code != 0:
        raise TaskSetupFailed(f"service {s.name!r} did not start: {started.stderr.strip()}")
    try:
        if s.healthcheck:
            s.healthcheck.wait(sandbox, s.workdir, f"service {s.name!r}")
        else:
            _wait_for_ports(sandbox, s)
    except TaskSetupFailed as e:
        tail = sandbox.exec(f"tail -20 {log}", user="root", timeout=30).stdout
        raise TaskSetupFailed(f"{e}; its output ends: {tail.strip()}") from None


def _wait_for_ports(sandbox: Sandbox, s: Service, attempts: int = 600) -> None:
    for port in s.ports:
        for _ in range(attempts):
            try:
                sandbox.connect(port).close()
                break
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.1)
        else:
            raise TaskSetupFailed(f"service {s.name!r} never listened on port {port}")


class _Bridge:
    """Keeps POOL channels open to one relay and joins each one the relay hands a connection to
    the service it asked for."""

    def __init__(
        self,
        sandbox: Sandbox,
        port: int,
        routes: dict[bytes, tuple[Sandbox, int]],  # b"address:port" -> (service sandbox, port)
        on_gone: Callable[[], None] | None,
    ):
        self.sandbox, self.port, self.routes, self.on_gone = sandbox, port, routes, on_gone
        self.idle = threading.Semaphore(POOL)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._keep, daemon=True, name="pomona-tb-bridge")
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.idle.release()

    def _keep(self) -> None:
        while not self.stopped.is_set():
            self.idle.acquire()
            if self.stopped.is_set():
                return
            try:
                channel = self.sandbox.connect(self.port)
            except Exception:  # noqa: BLE001 - the relay or its sandbox is gone
                self.idle.release()
                if self._sandbox_gone():
                    if self.on_gone is not None:
                        self.on_gone()
                    return
                self.stopped.wait(2)  # the relay was killed; its sandbox lives on
                continue
            threading.Thread(target=self._serve, args=(channel,), daemon=True).start()

    def _sandbox_gone(self) -> bool:
        try:
            self.sandbox.refresh()
        except Exception:  # noqa: BLE001 - whatever the reason, it is not there to serve
            return True
        return False

    def _serve(self, channel: SyncConnection) -> None:
        head = b""
        try:  # the relay is in the sandbox: what it says is input, read with bounds
            while b"\n" not in head and len(head) < MAX_ROUTE:
                data = channel.recv(MAX_ROUTE)
                if not data:
                    break  # the relay closed the channel
                head += data
        except Exception:  # noqa: BLE001 - the sandbox went away under an idle channel
            head = b""
        self.idle.release()  # this channel is taken (or gone): open another
        line, newline, rest = head.partition(b"\n")
        route = self.routes.get(line) if newline else None
        if route is None:  # no such service, or the channel closed before it named one
            channel.close()
            return
        try:
            target = route[0].connect(route[1])
        except Exception:  # noqa: BLE001 - not listening: refuse the client
            channel.close()
            return
        if rest:
            target.sendall(rest)
        threading.Thread(target=_pump, args=(target, channel), daemon=True).start()
        _pump(channel, target)


def _pump(source: SyncConnection, sink: SyncConnection) -> None:
    try:
        while data := source.recv():
            sink.sendall(data)
    except Exception:  # noqa: BLE001 - either end closing ends the connection
        pass
    for end in (source, sink):
        with contextlib.suppress(Exception):
            end.close()
