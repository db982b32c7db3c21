"""The Kubernetes runtime: one Pod (and one NetworkPolicy) per sandbox, through the official
`kubernetes` client, in one namespace the orchestrator's Role is limited to.

- Create writes the policy, then the pod (objects.py builds both), and waits for the sandbox
  container to run; a pod that cannot pull, start or be scheduled in time is removed and the
  error says why in the kubelet's words.
- Exec goes through the pods/exec subresource with the gate (gate.py) in front of the command:
  streaming, exit codes, caps (execution.py, shared with every runtime), stdin, and a timeout
  that SIGKILLs the command's process group through a second exec, never the pod.
- Files and tar go through exec too (the gate's busybox: cat, stat, find, tar), binary-safe.
- Port connect is the pods/portforward subresource; PTY a tty exec resized on channel 4.
- Snapshot: with a workspace storage class and a VolumeSnapshotClass, a CSI VolumeSnapshot of
  the workspace volume, and a fork is a new pod whose workspace is restored from it; otherwise a
  tar of the workdir kept in a snapshot store (any pyarrow filesystem: a shared volume, S3).
  Either way only the workdir is captured: what a command changed elsewhere in the container's
  filesystem, and running processes, are not (Kubernetes has no container checkpoint to build on).
- Ownership: every object carries `pomona.dev/owner`; a new process with the same owner adopts
  the running pods and removes the failed ones and policies left without a pod.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import json
import logging
import os
import posixpath
import secrets
import socket
import stat as statmod
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, fields
from typing import Any

from pomona.errors import (
    FileNotFoundInSandbox,
    ImageNotFound,
    InvalidRequest,
    PathOutsideSandbox,
    RuntimeUnavailable,
    SandboxConflict,
    SandboxFailed,
    SandboxNotFound,
    SnapshotNotFound,
)
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.runtimes.archives import clean_archive
from pomona.orchestrator.runtimes.kubernetes import gate, objects
from pomona.orchestrator.runtimes.kubernetes.channels import ChannelStream, GatedCommand, PodPty
from pomona.orchestrator.runtimes.kubernetes.objects import KubernetesSettings
from pomona.orchestrator.sources import ImageSources, archive_path, registry_host, sif_path
from pomona.orchestrator.types import (
    SANDBOX_HOME,
    SANDBOX_UID,
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

SNAPSHOT_GROUP, SNAPSHOT_VERSION, SNAPSHOT_PLURAL = (
    "snapshot.storage.k8s.io",
    "v1",
    "volumesnapshots",
)
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
START_ERRORS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
)
FILE_TYPES = {statmod.S_IFREG: "file", statmod.S_IFDIR: "directory", statmod.S_IFLNK: "symlink"}
ENV_PREFIX = "POMONA_K8S_"
log = logging.getLogger("pomona.kubernetes")


@dataclass
class _Live:
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
        self.sandboxes: dict[str, _Live] = {}
        self._refilling: asyncio.Task | None = None
        self._closing = False
        self._made_warm: dict[str, str] = {}  # pool pods this process made -> resourceVersion
        self._defaults: Limits | None = None  # the service's default limits (limit_defaults)
        self.core, self.stream_core, self.custom, self._api = self._clients(
            api, kubeconfig, context
        )
        self._stream_lock = threading.Lock()

    @staticmethod
    def _clients(
        api: Any, kubeconfig: str | None, context: str | None
    ) -> tuple[Any, Any, Any, Any]:
        """A CoreV1Api for requests and another on its own ApiClient for streams: the client's
        stream() swaps its ApiClient's transport while it connects, so sharing one would send
        concurrent requests down a WebSocket."""
        try:
            from kubernetes import client, config
            from kubernetes.client.rest import ApiException
        except ImportError as e:
            raise RuntimeUnavailable(
                "the kubernetes runtime needs the official client: pip install 'pomona[kubernetes]'"
            ) from e
        if api is None:
            try:
                if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
                    config.load_incluster_config()
                else:
                    config.load_kube_config(config_file=kubeconfig, context=context)
            except Exception as e:  # the client raises ConfigException, FileNotFoundError, ...
                raise RuntimeUnavailable(
                    f"no Kubernetes cluster configured: {e}. Point KUBECONFIG at a cluster's "
                    "kubeconfig (kind, k3s, a managed cluster) or run inside a pod with a service "
                    "account; docs/kubernetes.md walks through it"
                ) from None
            api = client.ApiClient()
        stream_api = client.ApiClient(api.configuration)
        return (
            client.CoreV1Api(api),
            client.CoreV1Api(stream_api),
            client.CustomObjectsApi(api),
            ApiException,
        )

    # -- API calls ----------------------------------------------------------------------------

    async def _call(
        self, fn: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        """A blocking client call off the loop; 404 is None when missing_ok; RBAC refusals and
        an unreachable API server become RuntimeUnavailable saying which."""
        import urllib3

        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise RuntimeUnavailable(f"the API server is unreachable: {e}") from None
        except self._api as e:
            if e.status == 404 and missing_ok:
                return None
            if e.status in (401, 403):
                raise RuntimeUnavailable(
                    f"the cluster refused {fn.__name__} in namespace {self.settings.namespace!r} "
                    f"({e.status} {e.reason}): the orchestrator's Role must allow it "
                    "(pomona deploy render writes one)"
                ) from None
            if e.status == 409:
                raise SandboxConflict(f"{fn.__name__}: {self._reason(e)}") from None
            if e.status == 422 or e.status == 400:
                raise InvalidRequest(
                    f"the API server refused {fn.__name__}: {self._reason(e)}"
                ) from None
            if e.status == 0 or e.status >= 500:
                raise RuntimeUnavailable(
                    f"the API server is unreachable or failing: {self._reason(e)}"
                ) from None
            raise SandboxFailed(f"{fn.__name__}: {self._reason(e)}") from None

    @staticmethod
    def _reason(error: Any) -> str:
        with contextlib.suppress(Exception):
            return json.loads(error.body).get("message") or str(error.reason)
        return str(getattr(error, "reason", error))

    # -- lifecycle ----------------------------------------------------------------------------

    def _selector(self, **extra: str) -> str:
        return ",".join(f"{k}={v}" for k, v in {objects.OWNER_LABEL: self.owner, **extra}.items())

    async def start(self) -> None:
        """Adopt this owner's running pods; remove failed ones, pods pending past the ready
        timeout (their creator died), and policies whose pod is gone."""
        ns = self.settings.namespace
        pods = await self._call(self.core.list_namespaced_pod, ns, label_selector=self._selector())
        selected = set()
        for pod in pods.items:
            labels = pod.metadata.labels or {}
            selected.add(labels.get(objects.SANDBOX_LABEL))
            if objects.WARM_LABEL in labels:
                if not self._container_running(pod):
                    await self._remove(pod.metadata.name)
                continue  # a pool pod: claimed by whoever creates a sandbox of its shape
            annotations = pod.metadata.annotations or {}
            try:
                sandbox_id = annotations[objects.ID_ANNOTATION]
                live = self._live_from(pod)
            except (KeyError, ValueError):
                await self._remove(pod.metadata.name)
                continue
            phase = pod.status.phase if pod.status else None
            if phase == "Running" and self._container_running(pod):
                self.sandboxes[sandbox_id] = live
            elif phase == "Pending" and time.time() - live.created_at < self.ready_timeout:
                continue  # another process may still be creating it
            else:
                await self._remove(pod.metadata.name)
        policies = await self._call(
            self.networking().list_namespaced_network_policy, ns, label_selector=self._selector()
        )
        for policy in policies.items:
            if (policy.metadata.labels or {}).get(objects.SANDBOX_LABEL) not in selected:
                await self._call(
                    self.networking().delete_namespaced_network_policy,
                    policy.metadata.name,
                    ns,
                    missing_ok=True,
                )
        # last, with no await after it: the service sets the default limits (limit_defaults)
        # before the filler's first step, so pool pods have the shape defaulted specs have
        self._refill()

    def networking(self) -> Any:
        from kubernetes import client

        return client.NetworkingV1Api(self.core.api_client)

    def _live_from(self, pod: Any) -> _Live:
        annotations = pod.metadata.annotations or {}
        return _Live(
            id=annotations[objects.ID_ANNOTATION],
            pod=pod.metadata.name,
            spec=SandboxSpec.model_validate_json(annotations[objects.SPEC_ANNOTATION]),
            created_at=float(annotations[objects.CREATED_ANNOTATION]),
            snapshot=annotations.get(objects.ORIGIN_ANNOTATION) or None,
        )

    @staticmethod
    def _container_running(pod: Any) -> bool:
        for status in (pod.status.container_statuses or []) if pod.status else []:
            if status.name == "sandbox":
                return bool(status.state and status.state.running)
        return False

    async def close(self) -> None:
        self._closing = True
        if self._refilling is not None:  # let the pod being made finish: cancelling a create
            with contextlib.suppress(Exception):  # half-way could leave it behind
                await self._refilling
        for name, version in list(self._made_warm.items()):
            with contextlib.suppress(SandboxConflict, RuntimeUnavailable, SandboxFailed):
                await self._delete_unclaimed(name, version)
        for api in (self.core, self.stream_core):
            with contextlib.suppress(Exception):
                api.api_client.close()

    async def refresh(self, sandbox_id: str) -> bool:
        """Re-read one sandbox from the cluster: how replicas sharing an owner see each other's."""
        pod = await self._find(sandbox_id)
        labels = (pod.metadata.labels or {}) if pod else {}
        if (
            pod is None
            or labels.get(objects.OWNER_LABEL) != self.owner
            or pod.metadata.deletion_timestamp
            or not self._container_running(pod)
        ):
            self.sandboxes.pop(sandbox_id, None)
            return False
        live = self._live_from(pod)
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
        self._defaults = defaults.model_copy(update={"pids": pids, "disk": disk})
        return self._defaults

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
        volume_snapshot = None
        tar = None
        if snapshot:
            volume_snapshot, tar = await self._snapshot_source(snapshot)
        created_at = time.time()
        pod = objects.sandbox_pod(
            sandbox_id,
            spec,
            self.settings,
            self.owner,
            created_at,
            route,
            origin=snapshot.id if snapshot else None,
            workspace_snapshot=volume_snapshot,
            defaults=self._defaults,
        )
        policy = objects.network_policy(sandbox_id, spec, self.settings, self.owner, route)
        ns, name = self.settings.namespace, pod["metadata"]["name"]
        await self._call(self.networking().create_namespaced_network_policy, ns, policy)
        if snapshot is None and self._poolable(spec):
            claimed = await self._claim(sandbox_id, spec, pod["metadata"], created_at)
            if claimed is not None:
                live = _Live(id=sandbox_id, pod=claimed, spec=spec, created_at=created_at)
                self.sandboxes[sandbox_id] = live
                return live.info()
        try:
            await self._create_pod(pod)
        except SandboxConflict:
            raise SandboxConflict(f"sandbox {sandbox_id!r} is being created or removed") from None
        except BaseException:
            await asyncio.shield(
                self._call(
                    self.networking().delete_namespaced_network_policy, name, ns, missing_ok=True
                )
            )
            raise
        live = _Live(
            id=sandbox_id,
            pod=name,
            spec=spec,
            created_at=created_at,
            snapshot=snapshot.id if snapshot else None,
        )
        try:
            await self._wait_running(name)
            await self._setup_dirs(live)
            if tar is not None:
                await self._untar(live, normalize(spec.workdir), tar)
        except BaseException:
            await asyncio.shield(self._remove(name))
            raise
        self.sandboxes[sandbox_id] = live
        return live.info()

    # -- warm pools ---------------------------------------------------------------------------

    @staticmethod
    def _shape(spec: SandboxSpec) -> dict[str, Any]:
        """What a pod is made of: the spec less what only metadata holds (labels, TTL)."""
        return spec.model_dump(exclude={"labels", "timeout"})

    def _pool_spec(self, image: str) -> SandboxSpec:
        """The spec of a pool pod: a sandbox of `image` with nothing set but the defaults."""
        return SandboxSpec(image=image, limits=self._defaults or Limits())

    def _poolable(self, spec: SandboxSpec) -> bool:
        return self.settings.warm_pools.get(spec.image, 0) > 0 and self._shape(spec) == self._shape(
            self._pool_spec(spec.image)
        )

    async def _create_pod(self, pod: dict[str, Any]) -> None:
        """Create the pod; one the API server stripped of `hostUsers: false` (its
        UserNamespacesSupport feature gate off) would make root inside root on the node: it is
        removed and the error says what to do."""
        ns, name = self.settings.namespace, pod["metadata"]["name"]
        made = await self._call(self.core.create_namespaced_pod, ns, pod)
        if pod["spec"].get("hostUsers") is False and made.spec.host_users is not False:
            await asyncio.shield(self._remove(name))
            raise RuntimeUnavailable(
                "this cluster's API server dropped hostUsers: false from the pod (its "
                "UserNamespacesSupport feature gate is off; Kubernetes 1.33 has it on): without "
                "a user namespace of its own, root in a sandbox is root on the node. Enable it, "
                "or set host_users=True (POMONA_K8S_HOST_USERS=true) to accept that"
            )

    async def _claim(
        self, sandbox_id: str, spec: SandboxSpec, metadata: dict[str, Any], created_at: float
    ) -> str | None:
        """Turn a ready pool pod into this sandbox: one patch that relabels it, conditional on
        its resourceVersion, so two replicas never claim the same pod. None: none was free."""
        ns = self.settings.namespace
        pool = await self._call(
            self.core.list_namespaced_pod,
            ns,
            label_selector=self._selector(**{objects.WARM_LABEL: objects.id_hash(spec.image)}),
        )
        for pod in pool.items:
            if pod.metadata.deletion_timestamp or not self._container_running(pod):
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
                await self._call(
                    self.core.patch_namespaced_pod,
                    pod.metadata.name,
                    ns,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            except SandboxConflict:
                continue  # another replica claimed it first
            self._made_warm.pop(pod.metadata.name, None)
            await self._call(
                self.networking().delete_namespaced_network_policy,
                pod.metadata.name,
                ns,
                missing_ok=True,
            )  # the pool's policy: it selects nothing now
            self._refill()
            return pod.metadata.name
        self._refill()
        return None

    def _refill(self) -> None:
        """Top every pool up in the background (one pod at a time; a failure waits for the next
        claim or start to try again)."""
        if (
            self.settings.warm_pools
            and not self._closing
            and (self._refilling is None or self._refilling.done())
        ):
            self._refilling = asyncio.create_task(self._fill_pools())

    async def _fill_pools(self) -> None:
        ns = self.settings.namespace
        for image, size in self.settings.warm_pools.items():
            selector = self._selector(**{objects.WARM_LABEL: objects.id_hash(image)})
            while not self._closing:
                pool = await self._call(self.core.list_namespaced_pod, ns, label_selector=selector)
                if len(pool.items) >= size:
                    break
                try:
                    await self._make_warm(image)
                except (SandboxFailed, ImageNotFound, InvalidRequest, RuntimeUnavailable) as e:
                    log.warning("warm pool for %s: %s", image, e)
                    return

    async def _make_warm(self, image: str) -> None:
        warm_id = f"warm-{secrets.token_hex(6)}"
        spec = self._pool_spec(image)
        pod = objects.sandbox_pod(
            warm_id, spec, self.settings, self.owner, time.time(), defaults=self._defaults
        )
        pod["metadata"]["labels"][objects.WARM_LABEL] = objects.id_hash(image)
        ns, name = self.settings.namespace, pod["metadata"]["name"]
        await self._call(
            self.networking().create_namespaced_network_policy,
            ns,
            objects.network_policy(warm_id, spec, self.settings, self.owner),
        )
        await self._create_pod(pod)
        try:
            await self._wait_running(name)
            live = _Live(id=warm_id, pod=name, spec=spec, created_at=time.time())
            await self._setup_dirs(live)
            ready = await self._call(self.core.read_namespaced_pod, name, ns)
            self._made_warm[name] = ready.metadata.resource_version
        except BaseException:
            await asyncio.shield(self._remove(name))
            raise

    async def _delete_unclaimed(self, name: str, version: str) -> None:
        """Delete a pool pod only if it is still the one we made (unclaimed: same version)."""
        from kubernetes import client

        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(resource_version=version)
        )
        if (
            await self._call(
                self.core.delete_namespaced_pod,
                name,
                self.settings.namespace,
                body=options,
                missing_ok=True,
            )
            is not None
        ):
            await self._call(
                self.networking().delete_namespaced_network_policy,
                name,
                self.settings.namespace,
                missing_ok=True,
            )
        self._made_warm.pop(name, None)

    async def _wait_running(self, name: str) -> None:
        """Poll the pod until its sandbox container runs; fail early on errors that do not heal."""
        deadline = time.monotonic() + self.ready_timeout
        delay, last = 0.05, "pending"
        while time.monotonic() < deadline:
            pod = await self._call(
                self.core.read_namespaced_pod, name, self.settings.namespace, missing_ok=True
            )
            if pod is None:
                raise SandboxFailed(f"pod {name} disappeared while starting (deleted elsewhere?)")
            status = pod.status
            if status.phase == "Running" and self._container_running(pod):
                return
            if status.phase in ("Failed", "Succeeded"):
                raise SandboxFailed(f"pod {name} stopped while starting: {self._why(pod)}")
            for container in (status.init_container_statuses or []) + (
                status.container_statuses or []
            ):
                waiting = container.state.waiting if container.state else None
                if waiting and waiting.reason in IMAGE_ERRORS:
                    raise ImageNotFound(
                        f"container {container.name} of {name}: cannot pull "
                        f"{container.image!r}: {waiting.message or waiting.reason}"
                    )
                if waiting and waiting.reason in START_ERRORS:
                    raise SandboxFailed(
                        f"container {container.name} of {name} cannot start: "
                        f"{waiting.reason}: {waiting.message or ''}"
                    )
                terminated = container.state.terminated if container.state else None
                if terminated and terminated.exit_code and container.name != "sandbox":
                    raise SandboxFailed(
                        f"init container {container.name} of {name} failed "
                        f"(exit {terminated.exit_code}): {terminated.message or terminated.reason}"
                    )
            last = self._why(pod) or last
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        raise SandboxFailed(f"pod {name} did not start within {self.ready_timeout:g} s: {last}")

    @staticmethod
    def _why(pod: Any) -> str:
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

    async def _detect_shell(self, live: _Live) -> str:
        probe = await self._helper(live, ["test", "-x", "/bin/bash"])
        return "/bin/bash" if probe.code == 0 else "/bin/sh"

    async def _setup_dirs(self, live: _Live) -> None:
        """/tmp 1777, the workdir and $HOME owned by the sandbox user."""
        if not self.settings.allow_root:
            return
        uid = live.uid
        script = (
            "chmod 1777 /tmp 2>/dev/null || { mkdir -p /tmp && chmod 1777 /tmp; }; "
            'mkdir -p "$1" "$2" && chown "$3:$3" "$1" "$2"'
        )
        done = await self._helper(
            live,
            ["sh", "-c", script, "setup", normalize(live.spec.workdir), SANDBOX_HOME, str(uid)],
        )
        if done.code:
            raise SandboxFailed(
                f"could not prepare the sandbox's directories: {done.err.decode(errors='replace')}"
            )

    async def _remove(self, name: str, policy: str | None = None) -> bool:
        ns = self.settings.namespace
        pod = await self._call(
            self.core.delete_namespaced_pod,
            name,
            ns,
            grace_period_seconds=0,
            propagation_policy="Background",
            missing_ok=True,
        )
        removed_policy = await self._call(
            self.networking().delete_namespaced_network_policy, policy or name, ns, missing_ok=True
        )
        return pod is not None or removed_policy is not None

    async def delete(self, sandbox_id: str) -> bool:
        live = self.sandboxes.pop(sandbox_id, None)
        if live is None and (found := await self._find(sandbox_id)) is not None:
            live = self._live_from(found)
        name = live.pod if live else objects.pod_name(sandbox_id)
        removed = await self._remove(name, policy=objects.pod_name(sandbox_id))
        return removed or live is not None

    async def _find(self, sandbox_id: str) -> Any:
        """The pod of a sandbox, by its label (a claimed pool pod keeps its own name)."""
        found = await self._call(
            self.core.list_namespaced_pod,
            self.settings.namespace,
            label_selector=self._selector(**{objects.SANDBOX_LABEL: objects.id_hash(sandbox_id)}),
        )
        return next(
            (p for p in found.items if objects.WARM_LABEL not in (p.metadata.labels or {})), None
        )

    async def list(self) -> list[SandboxInfo]:
        return [live.info() for live in self.sandboxes.values()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        live = self.sandboxes.get(sandbox_id)
        return None if live is None else live.info()

    def _get(self, sandbox_id: str) -> _Live:
        live = self.sandboxes.get(sandbox_id)
        if live is None:
            raise SandboxNotFound.of(sandbox_id)
        return live

    # -- exec ---------------------------------------------------------------------------------

    def _open(
        self, live: _Live, argv: builtins.list[str], stdin: bytes | None = None, tty: bool = False
    ) -> ChannelStream:
        """An exec stream on the sandbox container (the connect itself runs in the stream's thread)."""
        from kubernetes.stream import stream

        def connect() -> Any:
            with self._stream_lock:
                return stream(
                    self.stream_core.connect_get_namespaced_pod_exec,
                    live.pod,
                    self.settings.namespace,
                    container="sandbox",
                    command=argv,
                    stdin=tty or stdin is not None,
                    stdout=True,
                    stderr=not tty,
                    tty=tty,
                    binary=True,
                    _preload_content=False,
                )

        return ChannelStream(connect, stdin)

    async def _argv(self, live: _Live, request: ExecRequest, user: str) -> builtins.list[str]:
        if isinstance(request.command, str):
            if live.shell is None:
                live.shell = await self._detect_shell(live)
            command = [live.shell, *(["-l"] if request.login_shell else []), "-c", request.command]
        else:
            command = list(request.command)
        cwd = normalize(request.cwd or live.spec.workdir)
        env = {
            "HOME": "/root" if user == "root" else SANDBOX_HOME,
            "USER": user,
            "LOGNAME": user,
            "PWD": cwd,
            "LANG": "C.UTF-8",
            **request.env,
        }
        return [gate.BUSYBOX, "env", *(f"{k}={v}" for k, v in env.items()), *command]

    def _user(self, live: _Live, request: ExecRequest) -> str:
        user = request.user or live.spec.user
        if user == "root" and not self.settings.allow_root:
            raise InvalidRequest(
                "this kubernetes runtime runs sandboxes as non-root "
                "(allow_root=False): exec(user='root') is not possible"
            )
        return user

    def _switch(self, user: str) -> int | None:
        """The uid the gate must become for `user`; None when the pod already runs as it."""
        uid = 0 if user == "root" else SANDBOX_UID
        return None if uid == (0 if self.settings.allow_root else SANDBOX_UID) else uid

    def _signaller(self, live: _Live, exec_id: str, uid: int | None) -> Callable[[int], Any]:
        async def send(signum: int) -> None:
            await self._helper(live, gate.signal_argv(exec_id, signum, uid)[1:], raw=True)

        return send

    async def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        live = self._get(sandbox_id)
        user = self._user(live, request)
        exec_id, uid = secrets.token_hex(8), self._switch(user)
        data = request.stdin.encode() if request.stdin is not None else None
        argv = gate.exec_argv(
            exec_id,
            uid,
            normalize(request.cwd or live.spec.workdir),
            None if data is None else len(data),
            await self._argv(live, request, user),
        )
        stream = self._open(live, argv, data)
        send = self._signaller(live, exec_id, uid)
        command = GatedCommand(stream, lambda: send(9))
        async with contextlib.aclosing(
            execution.stream(command, stdin=None, timeout=request.timeout, cap=request.output_cap)
        ) as items:
            async for item in items:
                yield item

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> PodPty:
        live = self._get(sandbox_id)
        user = self._user(live, request)
        exec_id, uid = secrets.token_hex(8), self._switch(user)
        argv = gate.pty_argv(
            exec_id,
            uid,
            normalize(request.cwd or live.spec.workdir),
            rows,
            cols,
            await self._argv(live, request, user),
        )
        stream = self._open(live, argv, tty=True)
        await asyncio.shield(stream.opened)
        return PodPty(stream, self._signaller(live, exec_id, uid))

    @dataclass
    class _Done:
        code: int
        out: bytes
        err: bytes

    async def _helper(
        self,
        live: _Live,
        argv: builtins.list[str],
        stdin: bytes | None = None,
        raw: bool = False,
        timeout: float = 300,
    ) -> KubernetesRuntime._Done:
        """A file or housekeeping command as root (as the sandbox user when root is not allowed),
        through the gate's busybox: binary-safe output, whole."""
        argv = (
            [gate.BUSYBOX, *argv]
            if raw
            else gate.exec_argv(
                secrets.token_hex(8),
                None,
                "/",
                None if stdin is None else len(stdin),
                [gate.BUSYBOX, *argv],
            )
        )
        stream = self._open(live, argv, stdin)
        out, err = bytearray(), bytearray()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    name, data = await stream.queue.get()
                    if data is None:
                        break
                    (out if name == "stdout" else err).extend(data)
                code = await stream.exited
        except TimeoutError:
            raise SandboxFailed(
                f"sandbox {live.id!r}: {argv[1:3]} did not finish in {timeout:g} s"
            ) from None
        finally:
            await stream.close()
        return self._Done(code, bytes(out), bytes(err))

    # -- files --------------------------------------------------------------------------------

    async def _stat(self, live: _Live, path: str, follow: bool = False) -> FileInfo | None:
        done = await self._helper(
            live, ["stat", *(["-L"] if follow else []), "-c", "%f %s %Y", "--", path]
        )
        if done.code:
            if b"No such file" in done.err or b"Not a directory" in done.err:
                return None
            raise SandboxFailed(f"stat {path}: {done.err.decode(errors='replace').strip()}")
        raw, size, mtime = done.out.split()[:3]
        return _file_info(path, int(raw, 16), int(size), float(mtime))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        live = self._get(sandbox_id)
        path = normalize(path)
        info = await self._stat(live, path, follow=True)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if info.type != "file":
            raise InvalidRequest(
                f"{path} is a directory"
                if info.type == "directory"
                else f"{path} is not a regular file"
            )
        done = await self._helper(live, ["cat", "--", path])
        if done.code:
            raise FileNotFoundInSandbox(f"{path}: {done.err.decode(errors='replace').strip()}")
        return done.out

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        live = self._get(sandbox_id)
        path = normalize(path)
        if posixpath.basename(path) == "":
            raise InvalidRequest(f"{path!r} names a directory, not a file")
        # missing parents are made one by one and given to the sandbox user, like the file
        script = (
            'p=$1 m=$2 u=$3; shift 3; [ -d "$p" ] && { echo "$p is a directory" >&2; exit 21; }; '
            'for d in "$@"; do [ -d "$d" ] || { mkdir "$d" && chown "$u:$u" "$d"; } || exit 20; done; '
            'cat > "$p" && chmod "$m" "$p" && chown "$u:$u" "$p"'
        )
        parents = _ancestors(posixpath.dirname(path))
        done = await self._helper(
            live,
            ["sh", "-c", script, "write", path, oct(mode & 0o7777)[2:], str(live.uid), *parents],
            stdin=data,
        )
        if done.code == 21:
            raise InvalidRequest(f"{path} is a directory")
        if done.code:
            message = done.err.decode(errors="replace").strip()
            if "Not a directory" in message or "File exists" in message:
                raise InvalidRequest(f"a component of {path} is not a directory")
            raise SandboxFailed(f"could not write {path}: {message}")

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        live = self._get(sandbox_id)
        path = normalize(path)
        info = await self._stat(live, path)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        return info

    async def list_files(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        live = self._get(sandbox_id)
        path = normalize(path)
        info = await self._stat(live, path, follow=True)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if info.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")
        done = await self._helper(
            live,
            [
                "find",
                path.rstrip("/") + "/",
                "-mindepth",
                "1",
                "-maxdepth",
                "1",
                "-exec",
                gate.BUSYBOX,
                "stat",
                "-c",
                "%f %s %Y %n",
                "{}",
                "+",
            ],
        )
        entries = []
        for line in done.out.decode(errors="replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) != 4 or "/" not in parts[3]:
                continue  # a name with a newline in it: not listable this way
            name = parts[3].rsplit("/", 1)[1]
            entries.append(
                _file_info(
                    posixpath.join(path, name), int(parts[0], 16), int(parts[1]), float(parts[2])
                )
            )
        return sorted(entries, key=lambda e: e.name)

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        live = self._get(sandbox_id)
        path = normalize(path)
        if path == "/":
            raise InvalidRequest("refusing to remove the sandbox's root")
        info = await self._stat(live, path)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        argv = (
            (["rm", "-rf", "--", path] if recursive else ["rmdir", "--", path])
            if info.type == "directory"
            else ["rm", "-f", "--", path]
        )
        done = await self._helper(live, argv)
        if done.code:
            message = done.err.decode(errors="replace").strip()
            if "not empty" in message.lower():
                raise InvalidRequest(f"{path} is a non-empty directory; pass recursive=True")
            raise SandboxFailed(f"could not remove {path}: {message}")

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        """A directory's entries under "./", a file under its base name, as the other runtimes."""
        live = self._get(sandbox_id)
        path = normalize(path)
        info = await self._stat(live, path, follow=True)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if info.type == "directory":
            argv = ["tar", "-C", path, "-cf", "-", "."]
        else:
            argv = ["tar", "-C", posixpath.dirname(path), "-cf", "-", posixpath.basename(path)]
        done = await self._helper(live, argv)
        if done.code:
            raise SandboxFailed(
                f"could not archive {path}: {done.err.decode(errors='replace').strip()}"
            )
        return done.out

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        live = self._get(sandbox_id)
        await self._untar(live, normalize(path), tar)

    async def _untar(self, live: _Live, path: str, tar: bytes) -> None:
        """Unpack a cleaned archive (archive.clean) after checking that nothing it goes through
        is a symlink already in the sandbox: an upload never writes through links."""
        cleaned, prefixes = clean_archive(tar, live.uid)
        script = (
            't=$1 u=$2; shift 2; for d in "$@"; do [ -L "$t/$d" ] && { echo "$t/$d" >&2; exit 30; }; done; '
            'mkdir -p "$t" && chown "$u:$u" "$t" && exec tar -C "$t" -xf -'
        )
        done = await self._helper(
            live,
            ["sh", "-c", script, "untar", path, str(live.uid), *sorted(prefixes)],
            stdin=cleaned,
        )
        if done.code == 30:
            raise PathOutsideSandbox(
                f"{done.err.decode(errors='replace').strip()} is a symlink; an "
                "upload never writes through links"
            )
        if done.code:
            raise SandboxFailed(
                f"could not unpack into {path}: {done.err.decode(errors='replace').strip()}"
            )

    # -- snapshot and fork --------------------------------------------------------------------

    @property
    def _volume_snapshots(self) -> bool:
        return bool(self.settings.snapshot_class and self.settings.workspace_storage_class)

    def _store(self) -> tuple[Any, str]:
        from pyarrow import fs

        filesystem, base = (
            fs.FileSystem.from_uri(self.snapshot_store)
            if "://" in self.snapshot_store
            else (fs.LocalFileSystem(), os.path.abspath(self.snapshot_store))
        )
        return filesystem, f"{base.rstrip('/')}/{self.owner}"

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo:
        live = self._get(sandbox_id)
        if any(s.id == snapshot_id for s in await self.list_snapshots()):
            raise SandboxConflict(f"snapshot {snapshot_id!r} already exists")
        info = SnapshotInfo(
            id=snapshot_id,
            sandbox_id=sandbox_id,
            runtime=self.name,
            spec=live.spec,
            created_at=time.time(),
        )
        if self._volume_snapshots:
            body = objects.volume_snapshot(
                snapshot_id, live.pod, self.owner, self.settings, info.model_dump_json()
            )
            await self._call(
                self.custom.create_namespaced_custom_object,
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                self.settings.namespace,
                SNAPSHOT_PLURAL,
                body,
            )
            await self._wait_snapshot(objects.snapshot_name(snapshot_id))
            return info
        tar = await self.get_archive(sandbox_id, live.spec.workdir)
        filesystem, base = self._store()

        def save() -> None:
            filesystem.create_dir(base, recursive=True)
            for suffix, data in ((".tar", tar), (".json", info.model_dump_json().encode())):
                with filesystem.open_output_stream(f"{base}/{snapshot_id}{suffix}") as out:
                    out.write(data)  # the record last: a snapshot is listed only once whole

        await asyncio.to_thread(save)
        return info

    async def _wait_snapshot(self, name: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            body = await self._call(
                self.custom.get_namespaced_custom_object,
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                self.settings.namespace,
                SNAPSHOT_PLURAL,
                name,
            )
            status = body.get("status") or {}
            if status.get("readyToUse"):
                return
            if status.get("error"):
                raise SandboxFailed(f"VolumeSnapshot {name}: {status['error'].get('message')}")
            await asyncio.sleep(0.5)
        raise SandboxFailed(f"VolumeSnapshot {name} was not ready within {self.ready_timeout:g} s")

    async def _snapshot_source(self, snapshot: SnapshotInfo) -> tuple[str | None, bytes | None]:
        """What a fork starts from: a VolumeSnapshot's name, or the workspace tar."""
        if self._volume_snapshots:
            if not any(s.id == snapshot.id for s in await self.list_snapshots()):
                raise SnapshotNotFound.of(snapshot.id)
            return objects.snapshot_name(snapshot.id), None
        filesystem, base = self._store()

        def load() -> bytes:
            with filesystem.open_input_stream(f"{base}/{snapshot.id}.tar") as f:
                return f.read()

        try:
            return None, await asyncio.to_thread(load)
        except (FileNotFoundError, OSError):
            raise SnapshotNotFound.of(snapshot.id) from None

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        if self._volume_snapshots:
            found = await self._call(
                self.custom.list_namespaced_custom_object,
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                self.settings.namespace,
                SNAPSHOT_PLURAL,
                label_selector=self._selector(),
            )
            return [
                SnapshotInfo.model_validate_json(
                    item["metadata"]["annotations"][f"{objects.GROUP}/snapshot"]
                )
                for item in found.get("items", [])
            ]
        from pyarrow import fs

        filesystem, base = self._store()

        def scan() -> list[SnapshotInfo]:
            infos = filesystem.get_file_info(fs.FileSelector(base, allow_not_found=True))
            out = []
            for entry in infos:
                if entry.path.endswith(".json"):
                    with (
                        filesystem.open_input_stream(entry.path) as f,
                        contextlib.suppress(ValueError),
                    ):
                        out.append(SnapshotInfo.model_validate_json(f.read()))
            return out

        return await asyncio.to_thread(scan)

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        if not any(s.id == snapshot_id for s in await self.list_snapshots()):
            return False
        users = await self._call(
            self.core.list_namespaced_pod,
            self.settings.namespace,
            label_selector=self._selector(**{objects.ORIGIN_LABEL: objects.id_hash(snapshot_id)}),
        )
        if users.items:
            raise SandboxConflict(
                f"snapshot {snapshot_id!r} is in use by {len(users.items)} sandbox(es) "
                "forked from it; delete those first"
            )
        if self._volume_snapshots:
            await self._call(
                self.custom.delete_namespaced_custom_object,
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                self.settings.namespace,
                SNAPSHOT_PLURAL,
                objects.snapshot_name(snapshot_id),
                missing_ok=True,
            )
            return True
        filesystem, base = self._store()

        def drop() -> None:
            for suffix in (".json", ".tar"):
                with contextlib.suppress(FileNotFoundError, OSError):
                    filesystem.delete_file(f"{base}/{snapshot_id}{suffix}")

        await asyncio.to_thread(drop)
        return True

    # -- network ------------------------------------------------------------------------------

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """TCP to 127.0.0.1:port in the pod, through the pods/portforward subresource."""
        live = self._get(sandbox_id)
        from kubernetes.stream import portforward

        def connect() -> Any:
            with self._stream_lock:
                return portforward(
                    self.stream_core.connect_get_namespaced_pod_portforward,
                    live.pod,
                    self.settings.namespace,
                    ports=str(port),
                )

        try:
            forward = await asyncio.to_thread(connect)
        except Exception as e:
            raise SandboxFailed(f"port-forward to {sandbox_id}:{port} failed: {e}") from None
        return await asyncio.open_connection(sock=forward.socket(port)._socket)


def _file_info(path: str, raw_mode: int, size: int, mtime: float) -> FileInfo:
    kind = FILE_TYPES.get(statmod.S_IFMT(raw_mode), "other")
    return FileInfo(
        name=posixpath.basename(path) or "/",
        path=path,
        type=kind,  # type: ignore[arg-type]
        size=size if kind == "file" else 0,
        mode=statmod.S_IMODE(raw_mode),
        modified=mtime,
    )


def _ancestors(directory: str) -> list[str]:
    """ "/a/b/c" -> ["/a", "/a/b", "/a/b/c"]: the directories a write may have to make."""
    parts = [p for p in directory.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
