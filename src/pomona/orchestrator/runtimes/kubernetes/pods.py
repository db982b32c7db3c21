"""A sandbox's pod: its record (what the pod's annotations hold), and how a pod is made, waited
for until its sandbox container runs (failing early, in the kubelet's words, on what does not
heal), found by its sandbox's label, and removed with its NetworkPolicy."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from pomona.errors import ImageNotFound, RuntimeUnavailable, SandboxFailed
from pomona.orchestrator.runtimes.kubernetes import objects
from pomona.orchestrator.runtimes.kubernetes.cluster import Cluster
from pomona.orchestrator.runtimes.kubernetes.objects import KubernetesSettings
from pomona.orchestrator.types import SANDBOX_UID, Limits, SandboxInfo, SandboxSpec

IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
START_ERRORS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
)


@dataclass
class Live:
    """A sandbox this process serves: its id, its pod (a claimed pool pod keeps its own name)
    and the record its annotations carry."""

    id: str
    pod: str
    spec: SandboxSpec
    created_at: float
    shell: str | None = None  # learned on the first shell-string exec (bash if the image has it)
    snapshot: str | None = None

    @property
    def uid(self) -> int:
        return 0 if self.spec.user == "root" else SANDBOX_UID

    def info(self) -> SandboxInfo:
        return SandboxInfo(
            id=self.id,
            runtime="kubernetes",
            status="ready",
            spec=self.spec,
            created_at=self.created_at,
            snapshot=self.snapshot,
        )


def live_from(pod: Any) -> Live:
    """The record a sandbox's pod carries; KeyError or ValueError if it carries none."""
    annotations = pod.metadata.annotations or {}
    return Live(
        id=annotations[objects.ID_ANNOTATION],
        pod=pod.metadata.name,
        spec=SandboxSpec.model_validate_json(annotations[objects.SPEC_ANNOTATION]),
        created_at=float(annotations[objects.CREATED_ANNOTATION]),
        snapshot=annotations.get(objects.ORIGIN_ANNOTATION) or None,
    )


def running(pod: Any) -> bool:
    """Whether the pod's sandbox container runs."""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == "sandbox":
            return bool(status.state and status.state.running)
    return False


def why(pod: Any) -> str:
    """What the pod's conditions and containers say about it, first the failing ones."""
    for condition in pod.status.conditions or []:
        if condition.status == "False" and condition.message:
            return f"{condition.reason}: {condition.message}"
    for container in pod.status.container_statuses or []:
        state = container.state
        if state and state.terminated:
            return f"{state.terminated.reason} (exit {state.terminated.exit_code}) {state.terminated.message or ''}"
        if state and state.waiting:
            return f"{state.waiting.reason}: {state.waiting.message or ''}"
    return pod.status.message or pod.status.phase or ""


class Pods:
    """The sandbox pods of one owner. `defaults` are the service's default limits
    (limit_defaults), which every pod is built with."""

    def __init__(self, cluster: Cluster, settings: KubernetesSettings, ready_timeout: float):
        self.cluster, self.settings, self.ready_timeout = cluster, settings, ready_timeout
        self.defaults: Limits | None = None

    def manifest(
        self,
        sandbox_id: str,
        spec: SandboxSpec,
        created_at: float,
        route: objects.GatewayRoute | None = None,
        origin: str | None = None,
        workspace_snapshot: str | None = None,
    ) -> dict[str, Any]:
        return objects.sandbox_pod(
            sandbox_id,
            spec,
            self.settings,
            self.cluster.owner,
            created_at,
            route,
            origin=origin,
            workspace_snapshot=workspace_snapshot,
            defaults=self.defaults,
        )

    async def create_policy(
        self, sandbox_id: str, spec: SandboxSpec, route: objects.GatewayRoute | None = None
    ) -> None:
        policy = objects.network_policy(sandbox_id, spec, self.settings, self.cluster.owner, route)
        await self.cluster.call(
            self.cluster.networking.create_namespaced_network_policy,
            self.cluster.namespace,
            policy,
        )

    async def create(self, pod: dict[str, Any]) -> None:
        """Create the pod; one the API server stripped of `hostUsers: false` (its
        UserNamespacesSupport feature gate off) would make root inside root on the node: it is
        removed and the error says what to do."""
        made = await self.cluster.call(
            self.cluster.core.create_namespaced_pod, self.cluster.namespace, pod
        )
        if pod["spec"].get("hostUsers") is False and made.spec.host_users is not False:
            await asyncio.shield(self.remove(pod["metadata"]["name"]))
            raise RuntimeUnavailable(
                "this cluster's API server dropped hostUsers: false from the pod (its "
                "UserNamespacesSupport feature gate is off; Kubernetes 1.33 has it on): without "
                "a user namespace of its own, root in a sandbox is root on the node. Enable it, "
                "or set host_users=True (POMONA_K8S_HOST_USERS=true) to accept that"
            )

    async def read(self, name: str, missing_ok: bool = False) -> Any:
        return await self.cluster.call(
            self.cluster.core.read_namespaced_pod,
            name,
            self.cluster.namespace,
            missing_ok=missing_ok,
        )

    async def select(self, **labels: str) -> list[Any]:
        """This owner's pods that carry `labels`."""
        found = await self.cluster.call(
            self.cluster.core.list_namespaced_pod,
            self.cluster.namespace,
            label_selector=self.cluster.selector(**labels),
        )
        return list(found.items)

    async def wait_running(self, name: str) -> None:
        """Poll the pod until its sandbox container runs; fail early on errors that do not heal."""
        deadline = time.monotonic() + self.ready_timeout
        delay, last = 0.05, "pending"
        while time.monotonic() < deadline:
            pod = await self.read(name, missing_ok=True)
            if pod is None:
                raise SandboxFailed(f"pod {name} disappeared while starting (deleted elsewhere?)")
            status = pod.status
            if status.phase == "Running" and running(pod):
                return
            if status.phase in ("Failed", "Succeeded"):
                raise SandboxFailed(f"pod {name} stopped while starting: {why(pod)}")
            for container in (status.init_container_statuses or []) + (
                status.container_statuses or []
            ):
                _check_container(name, container)
            last = why(pod) or last
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        raise SandboxFailed(f"pod {name} did not start within {self.ready_timeout:g} s: {last}")

    async def remove(self, name: str, policy: str | None = None) -> bool:
        """Delete the pod and its policy (`policy`, if not named as the pod): whether either was
        there."""
        pod = await self.cluster.call(
            self.cluster.core.delete_namespaced_pod,
            name,
            self.cluster.namespace,
            grace_period_seconds=0,
            propagation_policy="Background",
            missing_ok=True,
        )
        removed_policy = await self.cluster.delete_policy(policy or name)
        return pod is not None or removed_policy is not None

    async def find(self, sandbox_id: str) -> Any:
        """The pod of a sandbox, by its label (a claimed pool pod keeps its own name)."""
        found = await self.select(**{objects.SANDBOX_LABEL: objects.id_hash(sandbox_id)})
        return next((p for p in found if objects.WARM_LABEL not in (p.metadata.labels or {})), None)


def _check_container(pod: str, container: Any) -> None:
    """Raise what a starting container's state says will not heal: an image that cannot be
    pulled, a container that cannot start, an init container that failed."""
    waiting = container.state.waiting if container.state else None
    if waiting and waiting.reason in IMAGE_ERRORS:
        raise ImageNotFound(
            f"container {container.name} of {pod}: cannot pull "
            f"{container.image!r}: {waiting.message or waiting.reason}"
        )
    if waiting and waiting.reason in START_ERRORS:
        raise SandboxFailed(
            f"container {container.name} of {pod} cannot start: "
            f"{waiting.reason}: {waiting.message or ''}"
        )
    terminated = container.state.terminated if container.state else None
    if terminated and terminated.exit_code and container.name != "sandbox":
        raise SandboxFailed(
            f"init container {container.name} of {pod} failed "
            f"(exit {terminated.exit_code}): {terminated.message or terminated.reason}"
        )
