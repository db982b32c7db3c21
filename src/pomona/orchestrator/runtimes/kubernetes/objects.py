"""The Kubernetes objects a sandbox is made of, as plain dicts (the API's own JSON shape), built
from a SandboxSpec and the runtime's settings. Pure functions: no client, no cluster, so every
object can be validated offline against the OpenAPI schemas and read in review.

A sandbox is one Pod plus one NetworkPolicy that selects only it:
- the Pod: an init container copies the gate (a static busybox) into an emptyDir; the harness
  payload comes from an image volume or a second init container; the user's image idles under
  the gate as pid 1; in `gateway` mode a sidecar forwards 127.0.0.1:<port> to the one allowed
  address. Hardened: its own user namespace (`hostUsers: false`: root in the pod is an
  unprivileged id on the node), the runtime's masked and read-only /proc paths (`procMount:
  Default`, the list Docker masks), seccomp RuntimeDefault, no service-account token, no
  service links, no privilege escalation, every capability dropped (root keeps only what it
  needs to act as root over files and to drop to the sandbox user, unless `allow_root=False`
  makes the whole pod non-root), optional runtimeClassName (gVisor, Kata).
- the NetworkPolicy: no ingress at all; egress none, to the gateway only, or (full) the
  internet minus private, link-local and metadata ranges, plus cluster DNS.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pomona.errors import InvalidRequest
from pomona.orchestrator.runtimes.kubernetes import gate
from pomona.orchestrator.types import (
    SANDBOX_HOME,
    SANDBOX_UID,
    Limits,
    NetworkMode,
    SandboxSpec,
    parse_bytes,
)

GROUP = "pomona.dev"
APP_LABEL = "app.kubernetes.io/name"
OWNER_LABEL = f"{GROUP}/owner"
SANDBOX_LABEL = f"{GROUP}/sandbox"  # a hash of the id: ids may hold characters labels cannot
WARM_LABEL = f"{GROUP}/warm"  # a pool pod, not yet a sandbox: the hash of its image
ORIGIN_LABEL = (
    f"{GROUP}/origin"  # the snapshot a fork came from (hashed), so in-use checks can list
)
USER_LABEL_PREFIX = f"label.{GROUP}/"
ID_ANNOTATION = f"{GROUP}/id"
SPEC_ANNOTATION = f"{GROUP}/spec"
CREATED_ANNOTATION = f"{GROUP}/created"
ORIGIN_ANNOTATION = f"{GROUP}/origin"
TOOLS_TARGET = "/opt/pomona/tools"
NOBODY = 65534
# Where `full` egress may not go: private, shared, link-local (cloud metadata) and loopback ranges.
PRIVATE_V4 = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "127.0.0.0/8",
    "0.0.0.0/8",
)
PRIVATE_V6 = ("fc00::/7", "fe80::/10", "::1/128")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SERVICE_HOST = re.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)(\.svc(\.[a-z0-9.-]+)?)?$")


@dataclass
class KubernetesSettings:
    """How sandboxes are laid out on a cluster; `pomona deploy render` writes the same values
    into the orchestrator's environment (see from_env in the runtime)."""

    namespace: str = "pomona-sandboxes"
    gate_image: str = "pomona/pomona:latest"  # holds /pomona/gate/busybox (the orchestrator image)
    tools_image: str | None = None  # the harness payload image (/pomona/tools)
    payload: str = "init-copy"  # or "image-volume" (Kubernetes >= 1.33, containerd >= 2.0)
    runtime_class: str | None = None  # e.g. "gvisor" or "kata"
    allow_root: bool = True  # False: the pod runs as the sandbox user; exec(user="root") is refused
    host_users: bool = False  # hostUsers: False gives each pod its own user namespace (Kubernetes
    # >= 1.33 with a runtime and kernel that support them); True only for nodes that cannot, where
    # root in a pod is root on the node
    root_capabilities: tuple[str, ...] = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID")
    default_cpu: str = "100m"  # requests when the spec sets no limit
    default_memory: str = "128Mi"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: list[str] = field(default_factory=list)
    workspace_storage_class: str | None = (
        None  # the workdir on its own volume (disk quota, snapshots)
    )
    snapshot_class: str | None = None  # VolumeSnapshotClass: snapshots of that volume
    pod_pids_limit: int | None = None  # the kubelet's podPidsLimit, if the admin set one
    gateway_selector: dict[str, str] = field(
        default_factory=lambda: {APP_LABEL: "pomona-proxy"}
    )  # pods behind a gateway Service
    gateway_pod_port: int | None = None  # their container port, if not the Service's port
    dns_selector: dict[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})
    warm_pools: dict[str, int] = field(default_factory=dict)  # image -> ready pods kept to claim
    max_lifetime: int | None = 7 * 24 * 3600  # activeDeadlineSeconds: the kubelet ends a pod no
    # orchestrator is left to reap (all replicas gone); None: no such limit


@dataclass(frozen=True)
class GatewayRoute:
    """Where a `gateway` sandbox may connect: an address the pod can reach (an IP, as the
    orchestrator resolved it, so the pod needs no DNS) and the policy peers that admit it."""

    address: str
    port: int
    inside_port: int  # 127.0.0.1:<inside_port> in the pod
    peers: tuple[dict[str, Any], ...]
    peer_port: int


def id_hash(sandbox_id: str, size: int = 16) -> str:
    return hashlib.sha256(sandbox_id.encode()).hexdigest()[:size]


def pod_name(sandbox_id: str) -> str:
    """A DNS label from any sandbox id: a readable slug plus a hash, so no two ids collide."""
    slug = re.sub(r"[^a-z0-9-]+", "-", sandbox_id).strip("-")[:40].strip("-")
    return f"sbx-{slug}-{id_hash(sandbox_id, 10)}" if slug else f"sbx-{id_hash(sandbox_id, 10)}"


def valid_label(key: str, value: str) -> bool:
    return bool(_LABEL_NAME.match(key) and _LABEL_VALUE.match(value))


def labels_for(
    sandbox_id: str, spec: SandboxSpec, owner: str, origin: str | None
) -> dict[str, str]:
    """Selector labels (owner, sandbox hash), plus the user's labels that Kubernetes can hold,
    so `kubectl get pods -l label.pomona.dev/run=r1` finds a run's sandboxes."""
    labels = {
        APP_LABEL: "pomona-sandbox",
        "app.kubernetes.io/managed-by": "pomona",
        OWNER_LABEL: owner,
        SANDBOX_LABEL: id_hash(sandbox_id),
    }
    if origin:
        labels[ORIGIN_LABEL] = id_hash(origin)
    for key, value in spec.labels.items():
        if valid_label(key, value):
            labels[USER_LABEL_PREFIX + key] = value
    return labels


def _quantity_cpu(cores: float) -> str:
    return f"{max(1, round(cores * 1000))}m"


def resources(
    spec: SandboxSpec, settings: KubernetesSettings, defaults: Limits | None = None
) -> dict[str, dict[str, str]]:
    """Requests equal limits where the spec asks for one (the scheduler reserves what may be
    used); small requests where it sets none, or where its limit is the service's default
    (`defaults`): a cap every sandbox gets is not a reservation of 2 cores per pod."""
    limits: dict[str, str] = {}
    if spec.limits.cpu:
        limits["cpu"] = _quantity_cpu(spec.limits.cpu)
    if spec.limits.memory:
        limits["memory"] = str(spec.limits.memory)
    if spec.limits.disk:
        limits["ephemeral-storage"] = str(spec.limits.disk)
    requests = {"cpu": settings.default_cpu, "memory": settings.default_memory, **limits}
    for name, asked, default, small, size in (
        ("cpu", spec.limits.cpu, defaults and defaults.cpu, settings.default_cpu, _cores),
        (
            "memory",
            spec.limits.memory,
            defaults and defaults.memory,
            settings.default_memory,
            _bytes,
        ),
    ):
        if asked and asked == default:  # a default limit: the small request, never above it
            requests[name] = small if size(small) <= asked else limits[name]
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


def _cores(quantity: str) -> float:
    """A CPU quantity ("100m", "2") in cores."""
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _bytes(quantity: str) -> float:
    """A memory quantity ("128Mi") in bytes."""
    return float(parse_bytes(quantity) or 0)


def _drop_all(uid: int | None = NOBODY) -> dict[str, Any]:
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "procMount": "Default",
    }
    if uid is not None:
        context.update(runAsUser=uid, runAsGroup=uid, runAsNonRoot=uid != 0)
    return context


def sandbox_context(settings: KubernetesSettings) -> dict[str, Any]:
    """The user's container: root with a handful of capabilities (so exec(user="root") works and
    the gate can drop to the sandbox user, who then holds none), or wholly the sandbox user."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": False,
        "procMount": "Default",  # the runtime's masked and read-only /proc paths, as Docker's
    }
    if settings.allow_root:
        context.update(
            runAsUser=0,
            runAsGroup=0,
            runAsNonRoot=False,
            capabilities={"drop": ["ALL"], "add": list(settings.root_capabilities)},
        )
    else:
        context.update(
            runAsUser=SANDBOX_UID,
            runAsGroup=SANDBOX_UID,
            runAsNonRoot=True,
            capabilities={"drop": ["ALL"]},
        )
    return context


def _tiny() -> dict[str, Any]:
    return {
        "requests": {"cpu": "10m", "memory": "16Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"},
    }


def sandbox_pod(
    sandbox_id: str,
    spec: SandboxSpec,
    settings: KubernetesSettings,
    owner: str,
    created_at: float,
    gateway: GatewayRoute | None = None,
    origin: str | None = None,
    workspace_snapshot: str | None = None,
    defaults: Limits | None = None,
) -> dict[str, Any]:
    """The Pod for one sandbox. `workspace_snapshot` names a VolumeSnapshot to fill the workspace
    volume from (a fork, where the CSI driver snapshots); `defaults` are the service's default
    limits (capped, not reserved)."""
    name = pod_name(sandbox_id)
    volumes, mounts, init = _storage(spec, settings, workspace_snapshot)
    containers = [
        {
            "name": "sandbox",
            "image": spec.image,
            "imagePullPolicy": settings.image_pull_policy,
            "command": gate.idle_argv(),
            "workingDir": spec.workdir,
            "env": [{"name": k, "value": v} for k, v in spec.env.items()],
            "resources": resources(spec, settings, defaults),
            "securityContext": sandbox_context(settings),
            "volumeMounts": mounts,
        }
    ]
    if gateway is not None:
        containers.append(
            {
                "name": "pomona-gateway",
                "image": settings.gate_image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": gate.forwarder(
                    "/pomona/gate/busybox", gateway.inside_port, gateway.address, gateway.port
                ),
                "securityContext": _drop_all(),
                "resources": _tiny(),
            }
        )
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1,
        **({"activeDeadlineSeconds": settings.max_lifetime} if settings.max_lifetime else {}),
        "hostname": name[:63],
        "hostUsers": settings.host_users,
        "securityContext": {
            "seccompProfile": {"type": "RuntimeDefault"},
            **({} if settings.allow_root else {"runAsNonRoot": True, "fsGroup": SANDBOX_UID}),
        },
        "initContainers": init,
        "containers": containers,
        "volumes": volumes,
    }
    pod_spec.update(_scheduling(settings))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels_for(sandbox_id, spec, owner, origin),
            "annotations": {
                ID_ANNOTATION: sandbox_id,
                SPEC_ANNOTATION: spec.model_dump_json(),
                CREATED_ANNOTATION: repr(created_at),
                ORIGIN_ANNOTATION: origin or "",
            },
        },
        "spec": pod_spec,
    }


def _scheduling(settings: KubernetesSettings) -> dict[str, Any]:
    """Where and how the pod runs, as far as the operator set it."""
    optional = {
        "runtimeClassName": settings.runtime_class,
        "nodeSelector": dict(settings.node_selector),
        "tolerations": list(settings.tolerations),
        "imagePullSecrets": [{"name": s} for s in settings.image_pull_secrets],
    }
    return {key: value for key, value in optional.items() if value}


def _storage(
    spec: SandboxSpec, settings: KubernetesSettings, workspace_snapshot: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes, the sandbox container's mounts of them, and the init containers that
    fill them: the gate, the harness payload, the workspace and home volumes."""
    gate_mount = {"name": "pomona-gate", "mountPath": gate.GATE_DIR, "readOnly": True}
    mounts: list[dict[str, Any]] = [gate_mount, {"name": "pomona-run", "mountPath": gate.RUN_DIR}]
    volumes: list[dict[str, Any]] = [
        {"name": "pomona-gate", "emptyDir": {"sizeLimit": "16Mi"}},
        {"name": "pomona-run", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
    ]
    init = [
        {
            "name": "pomona-gate",
            "image": settings.gate_image,
            "imagePullPolicy": settings.image_pull_policy,
            "command": [
                "/pomona/gate/busybox",
                "cp",
                "/pomona/gate/busybox",
                f"{gate.GATE_DIR}/busybox",
            ],
            "volumeMounts": [{"name": "pomona-gate", "mountPath": gate.GATE_DIR}],
            "securityContext": _drop_all(),
            "resources": _tiny(),
        }
    ]
    for mount in spec.mounts:
        volume, extra_init = _payload_volume(mount.target, settings)
        volumes.append(volume)
        payload_mount = {"name": volume["name"], "mountPath": mount.target, "readOnly": True}
        if "image" in volume:  # the tools image keeps the payload at /pomona/tools
            payload_mount["subPath"] = "pomona/tools"
        mounts.append(payload_mount)
        init += extra_init
    if settings.workspace_storage_class:
        volumes.append(_workspace_volume(spec, settings, workspace_snapshot))
        mounts.append({"name": "workspace", "mountPath": spec.workdir})
    elif not settings.allow_root:  # nobody can make them the sandbox user's: writable volumes
        volumes.append({"name": "workspace", "emptyDir": {}})
        mounts.append({"name": "workspace", "mountPath": spec.workdir})
    if not settings.allow_root and spec.workdir != SANDBOX_HOME:
        volumes.append({"name": "home", "emptyDir": {}})
        mounts.append({"name": "home", "mountPath": SANDBOX_HOME})
    return volumes, mounts, init


def _payload_volume(
    target: str, settings: KubernetesSettings
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The harness payload, read-only: an image volume, or an emptyDir an init container fills.
    Host paths are not mounted: on a cluster the orchestrator's disk is not the node's."""
    if target != TOOLS_TARGET or not settings.tools_image:
        from pomona.errors import InvalidRequest

        raise InvalidRequest(
            f"the kubernetes runtime mounts only the harness payload (target {TOOLS_TARGET}, "
            f"from tools_image=...), not host paths; got target {target!r}"
            + ("" if settings.tools_image else " and no tools_image is configured")
        )
    if settings.payload == "image-volume":
        return {
            "name": "pomona-tools",
            "image": {"reference": settings.tools_image, "pullPolicy": settings.image_pull_policy},
        }, []
    copy = {
        "name": "pomona-tools",
        "image": settings.tools_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": [f"{gate.GATE_DIR}/busybox", "cp", "-a", "/pomona/tools/.", "/payload/"],
        "volumeMounts": [
            {"name": "pomona-gate", "mountPath": gate.GATE_DIR, "readOnly": True},
            {"name": "pomona-tools", "mountPath": "/payload"},
        ],
        "securityContext": _drop_all(),
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    return {"name": "pomona-tools", "emptyDir": {}}, [copy]


def _workspace_volume(
    spec: SandboxSpec, settings: KubernetesSettings, snapshot: str | None
) -> dict[str, Any]:
    """A generic ephemeral volume for the workdir: sized by limits.disk (a full disk is ENOSPC,
    not an eviction), deleted with the pod, and snapshottable where the CSI driver is."""
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": settings.workspace_storage_class,
        "resources": {"requests": {"storage": str(spec.limits.disk or 10 * 2**30)}},
    }
    if snapshot:
        claim["dataSource"] = {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": snapshot,
        }
    return {
        "name": "workspace",
        "ephemeral": {
            "volumeClaimTemplate": {
                "metadata": {"labels": {APP_LABEL: "pomona-workspace"}},
                "spec": claim,
            }
        },
    }


def workspace_claim_name(pod: str) -> str:
    """What Kubernetes names a generic ephemeral volume's claim: <pod>-<volume>."""
    return f"{pod}-workspace"


def volume_snapshot(
    snapshot_id: str, pod: str, owner: str, settings: KubernetesSettings, record: str
) -> dict[str, Any]:
    """A CSI VolumeSnapshot of the workspace claim of a sandbox's pod (named by the pod: a
    claimed pool pod keeps its own name); `record` is the SnapshotInfo JSON."""
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": snapshot_name(snapshot_id),
            "namespace": settings.namespace,
            "labels": {OWNER_LABEL: owner, f"{GROUP}/snapshot": id_hash(snapshot_id)},
            "annotations": {f"{GROUP}/snapshot": record},
        },
        "spec": {
            "volumeSnapshotClassName": settings.snapshot_class,
            "source": {"persistentVolumeClaimName": workspace_claim_name(pod)},
        },
    }


def snapshot_name(snapshot_id: str) -> str:
    return "snap-" + pod_name(snapshot_id).removeprefix("sbx-")


def gateway_route(host: str, address: str, port: int, settings: KubernetesSettings) -> GatewayRoute:
    """Peers for a gateway: the resolved address (an ipBlock), and where the host names a
    Service (`name.namespace[.svc...]`), the pods behind it, because most CNIs match a policy
    after the Service's address was translated to a pod's."""
    peers: list[dict[str, Any]] = [
        {"ipBlock": {"cidr": address + ("/128" if ":" in address else "/32")}}
    ]
    match = _SERVICE_HOST.match(host)
    if match and _DNS_LABEL.match(match.group(2)):
        peers.append(
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": match.group(2)}
                },
                "podSelector": {"matchLabels": dict(settings.gateway_selector)},
            }
        )
    return GatewayRoute(
        address=address,
        port=port,
        inside_port=port,
        peers=tuple(peers),
        peer_port=settings.gateway_pod_port or port,
    )


def network_policy(
    sandbox_id: str,
    spec: SandboxSpec,
    settings: KubernetesSettings,
    owner: str,
    gateway: GatewayRoute | None = None,
) -> dict[str, Any]:
    """No ingress (exec and port-forward reach the pod through the kubelet, not the network);
    egress by network mode. Policies add up, so the namespace's default-deny stays in force for
    everything this one does not allow."""
    egress: list[dict[str, Any]] = []
    if spec.network == NetworkMode.gateway:
        if gateway is None:
            raise InvalidRequest("a gateway sandbox needs its GatewayRoute")
        ports = sorted({gateway.port, gateway.peer_port})
        egress.append(
            {"to": list(gateway.peers), "ports": [{"protocol": "TCP", "port": p} for p in ports]}
        )
    elif spec.network == NetworkMode.full:
        egress.append(
            {
                "to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_V4)}},
                    {"ipBlock": {"cidr": "::/0", "except": list(PRIVATE_V6)}},
                ]
            }
        )
        egress.append(
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                        },
                        "podSelector": {"matchLabels": dict(settings.dns_selector)},
                    }
                ],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": pod_name(sandbox_id),
            "namespace": settings.namespace,
            "labels": {
                OWNER_LABEL: owner,
                SANDBOX_LABEL: id_hash(sandbox_id),
                "app.kubernetes.io/managed-by": "pomona",
            },
        },
        "spec": {
            "podSelector": {"matchLabels": {SANDBOX_LABEL: id_hash(sandbox_id)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


def spec_of(pod: dict[str, Any]) -> SandboxSpec:
    return SandboxSpec.model_validate(json.loads(pod["metadata"]["annotations"][SPEC_ANNOTATION]))
