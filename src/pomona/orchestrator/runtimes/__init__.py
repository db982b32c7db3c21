"""The runtimes, one module each: `local` (namespaces + idmapped overlayfs + cgroups, the
default), `docker` (the Docker Engine API, which Podman's compatible socket also speaks; under
gVisor with isolation="gvisor") and `kubernetes` (a Pod per sandbox; a package of its own).

RUNTIMES is the table of them with what each can do, declared rather than guessed from its name;
adding a runtime is a module and a row here (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pomona.errors import InvalidRequest
from pomona.orchestrator.runtime import Runtime


@dataclass(frozen=True)
class RuntimeKind:
    """One runtime: how to make it, whether it has the machine's own root filesystem to give as
    the `host` image (only an embedded runtime can; containers need an image), whether it
    can run sandboxes under another isolation (gVisor), and whether several service processes
    may share its state (each sees what another created: `pomona serve --workers N`)."""

    name: str
    make: Callable[..., Runtime]
    host_filesystem: bool = False
    isolations: tuple[str, ...] = ("default",)
    shared_state: bool = False


def _local(state_dir: str | None, **options: Any) -> Runtime:
    from pomona.orchestrator.runtimes.local import LocalRuntime

    return LocalRuntime(state_dir or "/var/lib/pomona", **options)


def _engine(engine: str, isolation: str | None = None) -> Callable[..., Runtime]:
    def make(state_dir: str | None, **options: Any) -> Runtime:
        from pomona.orchestrator.runtimes.docker import DockerRuntime

        if isolation is not None:
            options["isolation"] = isolation
        return DockerRuntime(state_dir=state_dir, engine=engine, **options)

    return make


def _kubernetes(state_dir: str | None, **options: Any) -> Runtime:
    from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

    return KubernetesRuntime(state_dir=state_dir, **options)


RUNTIMES: dict[str, RuntimeKind] = {
    kind.name: kind
    for kind in (
        RuntimeKind("local", _local, host_filesystem=True, shared_state=True),
        RuntimeKind("docker", _engine("docker"), isolations=("default", "gvisor")),
        RuntimeKind("podman", _engine("podman"), isolations=("default", "gvisor")),
        RuntimeKind("gvisor", _engine("docker", "gvisor")),  # docker with isolation="gvisor"
        RuntimeKind("kubernetes", _kubernetes, shared_state=True),  # gVisor there is a RuntimeClass
    )
}


def register_runtime(kind: RuntimeKind) -> RuntimeKind:
    """Add a runtime defined outside this package (a plugin, a test) under a name not taken."""
    if kind.name in RUNTIMES:
        raise InvalidRequest(f"a runtime named {kind.name!r} exists already")
    RUNTIMES[kind.name] = kind
    return kind


def runtime_kind(name: str) -> RuntimeKind:
    try:
        return RUNTIMES[name]
    except KeyError:
        raise InvalidRequest(f"unknown runtime {name!r}: choose {', '.join(RUNTIMES)}") from None


def make_runtime(runtime: str, state_dir: str | None = None, **options: Any) -> Runtime:
    """The runtime by name. `isolation="gvisor"` (docker, podman) runs sandboxes under gVisor,
    and "gvisor" names docker so; on kubernetes that is a RuntimeClass (runtime_class=...)."""
    kind = runtime_kind(runtime)
    isolation = options.pop("isolation", "default")
    if isolation not in kind.isolations:
        raise InvalidRequest(
            f"isolation={isolation!r} is not available on the {runtime} runtime: gVisor runs "
            "under the docker runtime (isolation='gvisor'), and on a cluster through its "
            "RuntimeClass (the kubernetes runtime's runtime_class='gvisor')"
        )
    if isolation != "default":
        options["isolation"] = isolation
    return kind.make(state_dir, **options)
