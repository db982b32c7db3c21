"""The runtimes, one module each: `local` (namespaces + idmapped overlayfs + cgroups, the default),
`docker` (the Docker Engine API, which Podman's compatible socket also speaks) and `kubernetes`
(a Pod per sandbox; a package of its own, kubernetes/)."""

from __future__ import annotations

from typing import Any

from pomona.errors import InvalidRequest
from pomona.orchestrator.runtime import Runtime


def make_runtime(runtime: str, state_dir: str | None = None, **options: Any) -> Runtime:
    """The runtime by name. `isolation="gvisor"` (docker, podman) runs sandboxes under gVisor,
    and "gvisor" names docker so; on kubernetes that is a RuntimeClass (runtime_class=...)."""
    if runtime == "gvisor":
        runtime, options = "docker", {**options, "isolation": "gvisor"}
    if runtime in ("local", "kubernetes"):
        isolation = options.pop("isolation", "default")
        if isolation != "default":
            raise InvalidRequest(
                f"isolation={isolation!r} is not available on the {runtime} runtime: gVisor runs "
                "under the docker runtime (isolation='gvisor'), and on a cluster through its "
                "RuntimeClass (the kubernetes runtime's runtime_class='gvisor')"
            )
    if runtime == "local":
        from pomona.orchestrator.runtimes.local import LocalRuntime

        return LocalRuntime(state_dir or "/var/lib/pomona", **options)
    if runtime in ("docker", "podman"):
        from pomona.orchestrator.runtimes.docker import DockerRuntime

        return DockerRuntime(state_dir=state_dir, engine=runtime, **options)
    if runtime == "kubernetes":
        from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime(state_dir=state_dir, **options)
    raise ValueError(
        f"unknown runtime {runtime!r}: choose local, docker, podman, gvisor or kubernetes"
    )
