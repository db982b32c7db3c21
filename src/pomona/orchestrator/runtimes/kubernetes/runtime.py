"""`KubernetesRuntime`: the Runtime contract over one Pod (and one NetworkPolicy) per sandbox,
through the official `kubernetes` client, in one namespace the orchestrator's Role is limited to.
Its parts (the package's docstring lists them) each hold one seam; this module composes them and
owns the sandboxes' lifecycle.

- Create writes the policy, then the pod (objects.py builds both; a warm pool pod of the same
  shape is claimed instead, pools.py), and waits for the sandbox container to run; a pod that
  cannot pull, start or be scheduled in time is removed and the error says why in the kubelet's
  words (pods.py).
- Exec and terminals go through the pods/exec subresource with the gate in front (commands.py);
  files and tar through exec too (files.py); port connect is the pods/portforward subresource.
- Snapshot: a CSI VolumeSnapshot of the workspace volume, or a tar of the workdir in a snapshot
  store (snapshots.py). Either way only the workdir is captured: what a command changed
  elsewhere in the container's filesystem, and running processes, are not (Kubernetes has no
  container checkpoint to build on).
- Ownership: every object carries `pomona.dev/owner`; a new process with the same owner adopts
  the running pods and removes the failed ones and policies left without a pod.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import hashlib
import json
import os
import socket
import time
from collections.abc import AsyncGenerator
from dataclasses import fields
from typing import Any

from pomona.errors import (
    ImageNotFound,
    InvalidRequest,
    SandboxConflict,
    SandboxFailed,
    SandboxNotFound,
)
from pomona.orchestrator.runtimes.kubernetes import objects
from pomona.orchestrator.runtimes.kubernetes.channels import PodPty
from pomona.orchestrator.runtimes.kubernetes.cluster import Cluster
from pomona.orchestrator.runtimes.kubernetes.commands import Commands
from pomona.orchestrator.runtimes.kubernetes.files import PodFS
from pomona.orchestrator.runtimes.kubernetes.objects import KubernetesSettings
from pomona.orchestrator.runtimes.kubernetes.pods import Live, Pods, live_from, running
from pomona.orchestrator.runtimes.kubernetes.pools import WarmPools
from pomona.orchestrator.runtimes.kubernetes.snapshots import Snapshots
from pomona.orchestrator.sources import ImageSources, archive_path, registry_host, sif_path
from pomona.orchestrator.types import (
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    Limits,
    NetworkMode,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)

ENV_PREFIX = "POMONA_K8S_"


def settings_from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """POMONA_K8S_<FIELD> variables (the deployment's ConfigMap) as settings: JSON for dicts,
    lists and booleans, plain text otherwise."""
    environ = dict(os.environ if environ is None else environ)
    found: dict[str, Any] = {}
    for f in fields(KubernetesSettings):
        raw = environ.get(ENV_PREFIX + f.name.upper())
        if raw is None:
            continue
        kind = str(f.type)
        if any(t in kind for t in ("dict", "list", "tuple", "bool")):
            value = json.loads(raw)
            found[f.name] = tuple(value) if "tuple" in kind else value
        elif "int" in kind:
            found[f.name] = int(raw)
        else:
            found[f.name] = raw
    return found


class KubernetesRuntime:
    name = "kubernetes"

    def __init__(
        self,
        state_dir: str | None = None,
        owner: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        snapshot_store: str | None = None,
        ready_timeout: float = 300,
        api: Any = None,
        sources: ImageSources | None = None,
        **settings: Any,
    ):
        merged = {**settings_from_env(), **settings}
        try:
            self.settings = KubernetesSettings(**merged)
        except TypeError as e:
            raise InvalidRequest(f"kubernetes runtime settings: {e}") from None
        state_dir = os.path.abspath(state_dir or "/var/lib/pomona")
        self.owner = (
            owner
            or os.environ.get(ENV_PREFIX + "OWNER")
            or hashlib.sha256(f"pomona:{state_dir}".encode()).hexdigest()[:16]
        )
        self.snapshot_store = (
            snapshot_store
            or os.environ.get(ENV_PREFIX + "SNAPSHOT_STORE")
            or os.path.join(state_dir, "k8s-snapshots")
        )
        self.ready_timeout = ready_timeout
        self.sources = sources or ImageSources()
        self.sandboxes: dict[str, Live] = {}
        self.cluster = Cluster(api, kubeconfig, context, self.settings.namespace, self.owner)
        self.pods = Pods(self.cluster, self.settings, ready_timeout)
        self.commands = Commands(self.cluster, self.settings.allow_root)
        self.pools = WarmPools(self.pods, self.commands.prepare)
        self.snapshots = Snapshots(self.pods, self.snapshot_store)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Adopt this owner's running pods; remove failed ones, pods pending past the ready
        timeout (their creator died), and policies whose pod is gone."""
        selected = set()
        for pod in await self.pods.select():
            labels = pod.metadata.labels or {}
            selected.add(labels.get(objects.SANDBOX_LABEL))
            if objects.WARM_LABEL in labels:
                if not running(pod):
                    await self.pods.remove(pod.metadata.name)
                continue  # a pool pod: claimed by whoever creates a sandbox of its shape
            try:
                live = live_from(pod)
            except (KeyError, ValueError):
                await self.pods.remove(pod.metadata.name)
                continue
            phase = pod.status.phase if pod.status else None
            if phase == "Running" and running(pod):
                self.sandboxes[live.id] = live
            elif phase == "Pending" and time.time() - live.created_at < self.ready_timeout:
                continue  # another process may still be creating it
            else:
                await self.pods.remove(pod.metadata.name)
        policies = await self.cluster.call(
            self.cluster.networking.list_namespaced_network_policy,
            self.settings.namespace,
            label_selector=self.cluster.selector(),
        )
        for policy in policies.items:
            if (policy.metadata.labels or {}).get(objects.SANDBOX_LABEL) not in selected:
                await self.cluster.delete_policy(policy.metadata.name)
        # last, with no await after it: the service sets the default limits (limit_defaults)
        # before the filler's first step, so pool pods have the shape defaulted specs have
        self.pools.refill()

    async def close(self) -> None:
        await self.pools.close()
        self.cluster.close()

    async def refresh(self, sandbox_id: str) -> bool:
        """Re-read one sandbox from the cluster: how replicas sharing an owner see each other's."""
        pod = await self.pods.find(sandbox_id)
        labels = (pod.metadata.labels or {}) if pod else {}
        if (
            pod is None
            or labels.get(objects.OWNER_LABEL) != self.owner
            or pod.metadata.deletion_timestamp
            or not running(pod)
        ):
            self.sandboxes.pop(sandbox_id, None)
            return False
        live = live_from(pod)
        if (
            sandbox_id not in self.sandboxes
            or self.sandboxes[sandbox_id].created_at != live.created_at
        ):
            self.sandboxes[sandbox_id] = live
        return True

    def limit_defaults(self, defaults: Limits) -> Limits:
        """What a pod can be given for all: a pids limit only where the kubelet's podPidsLimit
        is declared (pod_pids_limit, the value every pod then has), a disk limit only with a
        workspace volume (an ephemeral-storage limit alone makes the kubelet evict the pod).
        Pods capped at these are not reserved at them (objects.resources), and pool pods have
        them."""
        pids = self.settings.pod_pids_limit if defaults.pids is not None else None
        disk = defaults.disk if self.settings.workspace_storage_class else None
        self.pods.defaults = defaults.model_copy(update={"pids": pids, "disk": disk})
        return self.pods.defaults

    # -- create and delete --------------------------------------------------------------------

    def _check(self, spec: SandboxSpec) -> None:
        if spec.image == "host":
            raise InvalidRequest(
                "the kubernetes runtime cannot use image='host' (the host's root "
                "filesystem); give an OCI image the cluster can pull"
            )
        self.sources.check(spec.image)
        if archive_path(spec.image) is not None or sif_path(spec.image) is not None:
            raise InvalidRequest(
                "the kubernetes runtime cannot use an image archive or SIF file: the kubelet pulls from "
                "registries; push it to one the cluster reaches"
            )
        registry = (
            registry_host(spec.image) or "docker.io"
        )  # where a kubelet pulls a bare name from
        if not self.sources.registry_allowed(registry):
            raise ImageNotFound(f"image {spec.image!r}: pulls from {registry} are not allowed here")
        if spec.user == "root" and not self.settings.allow_root:
            raise InvalidRequest(
                "this kubernetes runtime runs sandboxes as non-root "
                "(allow_root=False); create the sandbox with user='pomona'"
            )
        if spec.limits.disk and not self.settings.workspace_storage_class:
            raise InvalidRequest(
                "limits.disk needs workspace_storage_class= on this kubernetes runtime: the workdir "
                "then gets a volume of that size (a full disk is ENOSPC); an ephemeral-storage "
                "limit alone makes the kubelet evict the whole sandbox instead"
            )
        pids = spec.limits.pids
        if pids is not None and (
            self.settings.pod_pids_limit is None or pids < self.settings.pod_pids_limit
        ):
            raise InvalidRequest(
                "limits.pids: Kubernetes has no per-pod pids field; the kubelet's podPidsLimit "
                f"caps every pod of a node ({self.settings.pod_pids_limit or 'not declared'} here). "
                "Set podPidsLimit in the kubelet configuration and declare it with "
                "pod_pids_limit=N; specs asking for at least N are then accepted"
            )

    async def _gateway(self, spec: SandboxSpec) -> objects.GatewayRoute | None:
        if spec.network != NetworkMode.gateway:
            return None
        host, port = spec.gateway_address
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as e:
            raise InvalidRequest(
                f"gateway {spec.gateway!r}: cannot resolve {host!r} from the "
                f"orchestrator ({e}); give a Service name or an IP"
            ) from None
        address = str(infos[0][4][0])  # an IPv4 or IPv6 address (AF_INET or AF_INET6)
        if address.startswith("127.") or address == "::1":
            raise InvalidRequest(
                f"gateway {spec.gateway!r} is a loopback address: a pod cannot "
                "reach the orchestrator's loopback; give the proxy's Service name"
            )
        return objects.gateway_route(host, address, port, self.settings)

    async def create(
        self, sandbox_id: str, spec: SandboxSpec, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        if sandbox_id in self.sandboxes:
            raise SandboxConflict(f"sandbox {sandbox_id!r} already exists")
        self._check(spec)
        route = await self._gateway(spec)
        volume_snapshot, tar = await self.snapshots.source(snapshot) if snapshot else (None, None)
        created_at = time.time()
        pod = self.pods.manifest(
            sandbox_id,
            spec,
            created_at,
            route,
            origin=snapshot.id if snapshot else None,
            workspace_snapshot=volume_snapshot,
        )
        name = pod["metadata"]["name"]
        await self.pods.create_policy(sandbox_id, spec, route)
        if snapshot is None and self.pools.fits(spec):
            claimed = await self.pools.claim(sandbox_id, spec, pod["metadata"], created_at)
            if claimed is not None:
                live = Live(id=sandbox_id, pod=claimed, spec=spec, created_at=created_at)
                self.sandboxes[sandbox_id] = live
                return live.info()
        try:
            await self.pods.create(pod)
        except SandboxConflict:
            raise SandboxConflict(f"sandbox {sandbox_id!r} is being created or removed") from None
        except BaseException:
            await asyncio.shield(self.cluster.delete_policy(name))
            raise
        live = Live(
            id=sandbox_id,
            pod=name,
            spec=spec,
            created_at=created_at,
            snapshot=snapshot.id if snapshot else None,
        )
        try:
            await self.pods.wait_running(name)
            await self.commands.prepare(live)
            if tar is not None:
                await self._fs(live).tar_in(spec.workdir, tar)
        except BaseException:
            await asyncio.shield(self.pods.remove(name))
            raise
        self.sandboxes[sandbox_id] = live
        return live.info()

    async def delete(self, sandbox_id: str) -> bool:
        live = self.sandboxes.pop(sandbox_id, None)
        if live is None and (found := await self.pods.find(sandbox_id)) is not None:
            live = live_from(found)
        name = live.pod if live else objects.pod_name(sandbox_id)
        removed = await self.pods.remove(name, policy=objects.pod_name(sandbox_id))
        return removed or live is not None

    async def list(self) -> builtins.list[SandboxInfo]:
        return [live.info() for live in self.sandboxes.values()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        live = self.sandboxes.get(sandbox_id)
        return None if live is None else live.info()

    def _get(self, sandbox_id: str) -> Live:
        live = self.sandboxes.get(sandbox_id)
        if live is None:
            raise SandboxNotFound.of(sandbox_id)
        return live

    # -- exec ---------------------------------------------------------------------------------

    async def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        live = self._get(sandbox_id)
        async with contextlib.aclosing(self.commands.exec(live, request)) as items:
            async for item in items:
                yield item

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> PodPty:
        return await self.commands.open_pty(self._get(sandbox_id), request, rows, cols)

    # -- files --------------------------------------------------------------------------------

    def _fs(self, live: Live) -> PodFS:
        return PodFS(functools.partial(self.commands.helper, live), live.uid)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await self._fs(self._get(sandbox_id)).read(path)

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        await self._fs(self._get(sandbox_id)).write(path, data, mode)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self._fs(self._get(sandbox_id)).stat(path)

    async def list_files(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        return await self._fs(self._get(sandbox_id)).list(path)

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        await self._fs(self._get(sandbox_id)).remove(path, recursive)

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        return await self._fs(self._get(sandbox_id)).tar_out(path)

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        await self._fs(self._get(sandbox_id)).tar_in(path, tar)

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo:
        live = self._get(sandbox_id)
        return await self.snapshots.take(live, snapshot_id, self._fs(live).tar_out)

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        return await self.snapshots.list()

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        return await self.snapshots.delete(snapshot_id)

    # -- network ------------------------------------------------------------------------------

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """TCP to 127.0.0.1:port in the pod, through the pods/portforward subresource."""
        live = self._get(sandbox_id)
        from kubernetes.stream import portforward

        def connect() -> Any:
            with self.cluster.stream_lock:
                return portforward(
                    self.cluster.stream_core.connect_get_namespaced_pod_portforward,
                    live.pod,
                    self.settings.namespace,
                    ports=str(port),
                )

        try:
            forward = await asyncio.to_thread(connect)
        except Exception as e:
            raise SandboxFailed(f"port-forward to {sandbox_id}:{port} failed: {e}") from None
        return await asyncio.open_connection(sock=forward.socket(port)._socket)
