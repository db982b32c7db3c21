"""Warm pools (the `warm_pools` setting: image -> size): ready pods of the default shape, made in
the background, that a new sandbox of that shape claims instead of starting a pod of its own.
A claim is one merge patch that relabels the pod, conditional on the resourceVersion it was
listed with, so two replicas sharing an owner never claim the same pod."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pomona.errors import (
    ImageNotFound,
    InvalidRequest,
    RuntimeUnavailable,
    SandboxConflict,
    SandboxFailed,
)
from pomona.orchestrator.runtimes.kubernetes import objects
from pomona.orchestrator.runtimes.kubernetes.pods import Live, Pods, running
from pomona.orchestrator.types import Limits, SandboxSpec

log = logging.getLogger("pomona.kubernetes")


class WarmPools:
    """The pools of one owner. `prepare` readies a started pod's directories (as for any
    sandbox); `made` holds the pool pods this process made and nobody has claimed yet, with the
    resourceVersion they had when ready."""

    def __init__(self, pods: Pods, prepare: Callable[[Live], Awaitable[None]]):
        self.pods, self.cluster, self.sizes = pods, pods.cluster, pods.settings.warm_pools
        self.prepare = prepare
        self.made: dict[str, str] = {}
        self._refilling: asyncio.Task[None] | None = None
        self._closing = False

    @staticmethod
    def _shape(spec: SandboxSpec) -> dict[str, Any]:
        """What a pod is made of: the spec less what only metadata holds (labels, TTL)."""
        return spec.model_dump(exclude={"labels", "timeout"})

    def _spec(self, image: str) -> SandboxSpec:
        """The spec of a pool pod: a sandbox of `image` with nothing set but the defaults."""
        return SandboxSpec(image=image, limits=self.pods.defaults or Limits())

    def fits(self, spec: SandboxSpec) -> bool:
        """Whether a sandbox of `spec` may take a pool pod."""
        return self.sizes.get(spec.image, 0) > 0 and self._shape(spec) == self._shape(
            self._spec(spec.image)
        )

    async def claim(
        self, sandbox_id: str, spec: SandboxSpec, metadata: dict[str, Any], created_at: float
    ) -> str | None:
        """Turn a ready pool pod into this sandbox: one patch that relabels it, conditional on
        its resourceVersion, so two replicas never claim the same pod. None: none was free."""
        for pod in await self.pods.select(**{objects.WARM_LABEL: objects.id_hash(spec.image)}):
            if pod.metadata.deletion_timestamp or not running(pod):
                continue
            labels = {k: None for k in (pod.metadata.labels or {}) if k not in metadata["labels"]}
            patch = {
                "metadata": {
                    "resourceVersion": pod.metadata.resource_version,
                    "labels": {**labels, **metadata["labels"]},
                    "annotations": metadata["annotations"],
                }
            }
            try:
                await self.cluster.call(
                    self.cluster.core.patch_namespaced_pod,
                    pod.metadata.name,
                    self.cluster.namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            except SandboxConflict:
                continue  # another replica claimed it first
            self.made.pop(pod.metadata.name, None)
            await self.cluster.delete_policy(
                pod.metadata.name
            )  # the pool's: it selects nothing now
            self.refill()
            return pod.metadata.name
        self.refill()
        return None

    def refill(self) -> None:
        """Top every pool up in the background (one pod at a time; a failure waits for the next
        claim or start to try again)."""
        if self.sizes and not self._closing and (self._refilling is None or self._refilling.done()):
            self._refilling = asyncio.create_task(self._fill())

    async def _fill(self) -> None:
        for image, size in self.sizes.items():
            while not self._closing:
                pool = await self.pods.select(**{objects.WARM_LABEL: objects.id_hash(image)})
                if len(pool) >= size:
                    break
                try:
                    await self._make(image)
                except (SandboxFailed, ImageNotFound, InvalidRequest, RuntimeUnavailable) as e:
                    log.warning("warm pool for %s: %s", image, e)
                    return

    async def _make(self, image: str) -> None:
        warm_id = f"warm-{secrets.token_hex(6)}"
        spec = self._spec(image)
        pod = self.pods.manifest(warm_id, spec, time.time())
        pod["metadata"]["labels"][objects.WARM_LABEL] = objects.id_hash(image)
        name = pod["metadata"]["name"]
        await self.pods.create_policy(warm_id, spec)
        await self.pods.create(pod)
        try:
            await self.pods.wait_running(name)
            await self.prepare(Live(id=warm_id, pod=name, spec=spec, created_at=time.time()))
            ready = await self.pods.read(name)
            self.made[name] = ready.metadata.resource_version
        except BaseException:
            await asyncio.shield(self.pods.remove(name))
            raise

    async def _delete_unclaimed(self, name: str, version: str) -> None:
        """Delete a pool pod only if it is still the one we made (unclaimed: same version)."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(resource_version=version)
        )
        deleted = await self.cluster.call(
            self.cluster.core.delete_namespaced_pod,
            name,
            self.cluster.namespace,
            body=options,
            missing_ok=True,
        )
        if deleted is not None:
            await self.cluster.delete_policy(name)
        self.made.pop(name, None)

    async def close(self) -> None:
        """Stop refilling and delete what this process made that nobody claimed."""
        self._closing = True
        if self._refilling is not None:  # let the pod being made finish: cancelling a create
            with contextlib.suppress(Exception):  # half-way could leave it behind
                await self._refilling
        for name, version in list(self.made.items()):
            with contextlib.suppress(SandboxConflict, RuntimeUnavailable, SandboxFailed):
                await self._delete_unclaimed(name, version)
