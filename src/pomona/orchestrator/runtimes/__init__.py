"""The runtimes, one file each: `local` (bubblewrap + overlayfs + cgroups, the embedded default),
`docker` (the Docker Engine API, which Podman's compatible socket also speaks) and `kubernetes`
(a Pod per sandbox; a package of its own, kubernetes/)."""

from __future__ import annotations

from typing import Any

from pomona.orchestrator.runtime import Runtime


def make_runtime(runtime: str, state_dir: str | None = None, **options: Any) -> Runtime:
    if runtime == "local":
        from pomona.orchestrator.runtimes.local import LocalRuntime

        return LocalRuntime(state_dir or "/var/lib/pomona", **options)
    if runtime in ("docker", "podman"):
        from pomona.orchestrator.runtimes.docker import DockerRuntime

        return DockerRuntime(state_dir=state_dir, engine=runtime, **options)
    if runtime == "kubernetes":
        from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

        return KubernetesRuntime(state_dir=state_dir, **options)
    raise ValueError(f"unknown runtime {runtime!r}: choose local, docker, podman or kubernetes")
