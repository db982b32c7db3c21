"""`pomona deploy render`: every Kubernetes object a Pomona deployment needs, from one set of
values, as YAML for `kubectl apply -f -`.

Two namespaces. `pomona` holds the orchestrator (replicas behind a Service, a
PodDisruptionBudget and a HorizontalPodAutoscaler), the recording proxy, and Redis (password
from a Secret, `noeviction`, append-only file on a PersistentVolumeClaim). The sandbox namespace
holds nothing but sandbox pods: a default-deny NetworkPolicy, and the only Role the
orchestrator gets — pods, exec, port-forward, NetworkPolicies and VolumeSnapshots there and
nowhere else (no ClusterRole at all). Secrets are referenced, never rendered: API keys, the Redis
password and upstream model keys are created by the operator (docs/kubernetes.md says how).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pomona.orchestrator.runtimes.kubernetes.objects import APP_LABEL

PART_OF = "app.kubernetes.io/part-of"


@dataclass
class Values:
    """What an operator sets (YAML keys of the same names in --values)."""

    namespace: str = "pomona"
    sandbox_namespace: str = "pomona-sandboxes"
    image: str = "pomona/pomona:latest"  # orchestrator, proxy and the in-pod gate
    tools_image: str = "pomona/tools:latest"  # the harness payload
    redis_image: str = "redis:7.2"
    replicas: int = 3
    max_replicas: int = 10
    proxy_replicas: int = 2
    orchestrator_cpu: str = "2"
    orchestrator_memory: str = "4Gi"
    proxy_cpu: str = "2"
    proxy_memory: str = "4Gi"
    redis_storage: str = "10Gi"
    storage_class: str | None = None  # for Redis' claim; None: the cluster default
    shared_storage_class: str | None = None  # ReadWriteMany, for trajectories and snapshots
    shared_storage: str = "100Gi"
    trajectories: str | None = None  # an object store URI (s3://...); None: the shared volume
    snapshot_store: str | None = None  # likewise, for tar snapshots of workspaces
    runtime_class: str | None = None  # gvisor / kata for sandbox pods
    payload: str = "init-copy"  # or image-volume (Kubernetes >= 1.33)
    allow_root: bool = True
    workspace_storage_class: str | None = None
    snapshot_class: str | None = None
    sandbox_node_selector: dict[str, str] = field(default_factory=dict)
    warm_pools: dict[str, int] = field(default_factory=dict)  # image -> ready pods kept to claim
    service_type: str = "ClusterIP"  # LoadBalancer to expose the API (put TLS in front)
    # -- for RL: the proxy's upstreams, the object store, who may reach the services ------------
    models: list[dict[str, Any]] = field(default_factory=list)  # the proxy's model_list
    model_keys: list[str] = field(default_factory=lambda: ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"])
    model_servers: list[dict[str, Any]] = field(default_factory=list)  # in-cluster upstreams
    object_store: dict[str, Any] | None = None  # an HTTP S3-compatible store's pods or address
    s3_secret: str = "pomona-s3"  # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN)
    trainer_namespaces: list[str] = field(default_factory=list)  # reach proxy and orchestrator
    prometheus_namespace: str | None = None  # may scrape /metrics of both
    proxy_host: str | None = None  # an Ingress for the proxy (trainers outside the cluster)
    api_host: str | None = None  # an Ingress for the orchestrator's API
    ingress_class: str | None = None
    ingress_tls_secret: str | None = None
    ingress_namespace: str = "ingress-nginx"  # the ingress controller's, let in by the policies
    api_server_cidrs: list[str] = field(default_factory=list)  # the orchestrator's egress

    @classmethod
    def load(cls, path: Path | None, overrides: dict[str, Any]) -> Values:
        data: dict[str, Any] = {}
        if path:
            import yaml

            data = yaml.safe_load(path.read_text()) or {}
        data.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SystemExit(
                f"unknown values: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values = cls(**data)
        values.check()
        return values

    def check(self) -> None:
        """Refuse what would put a secret in a manifest or leave a policy unable to work."""
        for model in self.models:
            key = (model.get("litellm_params") or {}).get("api_key")
            if key is not None and not str(key).startswith("os.environ/"):
                raise SystemExit(
                    f"model {model.get('model_name')!r}: its api_key would be rendered in the "
                    "ConfigMap; put it in Secret pomona-model-keys and write os.environ/NAME"
                )
        for peer in [*self.model_servers, *([self.object_store] if self.object_store else [])]:
            if "port" not in peer or not ({"namespace", "cidr"} & set(peer)):
                raise SystemExit(f"{peer}: give a port and either namespace (+ labels) or cidr")

    def key_names(self) -> list[str]:
        """Environment variables the proxy takes from Secret pomona-model-keys: `model_keys` and
        every os.environ/NAME the model list names."""
        named = [
            str((m.get("litellm_params") or {}).get("api_key", "")).removeprefix("os.environ/")
            for m in self.models
        ]
        return sorted({*self.model_keys, *(n for n in named if n)})

    def s3(self) -> bool:
        return any(u and u.startswith("s3://") for u in (self.trajectories, self.snapshot_store))


def _meta(name: str, namespace: str | None, component: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {APP_LABEL: name, PART_OF: "pomona", "app.kubernetes.io/component": component},
    }
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def _restricted(uid: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _env(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": optional}},
    }


def _deployment(
    v: Values,
    name: str,
    replicas: int,
    args: list[str],
    port: int,
    health: str,
    env: list[dict[str, Any]],
    cpu: str,
    memory: str,
    mounts: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    service_account: str | None,
) -> dict[str, Any]:
    selector = {APP_LABEL: name}
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": service_account is not None,
        "securityContext": {
            "runAsNonRoot": True,
            "fsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector},
            }
        ],
        "containers": [
            {
                "name": name,
                "image": v.image,
                "args": args,
                "env": env,
                "ports": [{"name": "http", "containerPort": port}],
                "readinessProbe": {
                    "httpGet": {"path": health, "port": port},
                    "periodSeconds": 5,
                },
                "livenessProbe": {
                    "httpGet": {"path": health, "port": port},
                    "periodSeconds": 10,
                    "failureThreshold": 6,
                },
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    "limits": {"memory": memory},
                },
                "securityContext": _restricted(10001),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *mounts],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}, *volumes],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, v.namespace, name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": _meta(name, None, name)["labels"]},
                "spec": pod_spec,
            },
        },
    }


def _service(v: Values, name: str, port: int, kind: str = "ClusterIP") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, v.namespace, name),
        "spec": {
            "type": kind,
            "selector": {APP_LABEL: name},
            "ports": [
                {"name": "http" if port != 6379 else "redis", "port": port, "targetPort": port}
            ],
        },
    }


def _pdb(v: Values, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name, v.namespace, name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {APP_LABEL: name}}},
    }


def _policy(
    name: str, namespace: str, selector: dict[str, str], ingress: list[Any], egress: list[Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, namespace, "network"),
        "spec": {
            "podSelector": {"matchLabels": selector} if selector else {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def _from(namespace: str, app: str | None = None) -> dict[str, Any]:
    peer: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    if app:
        peer["podSelector"] = {"matchLabels": {APP_LABEL: app}}
    return peer


DNS = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
SANDBOX_RULES = [  # everything the orchestrator may do, and only in the sandbox namespace
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": [
            "create",
            "get",
            "list",
            "watch",
            "delete",
            "patch",
        ],  # patch: claiming a pool pod
    },
    {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["create", "get", "list", "delete"],
    },
    {
        "apiGroups": ["snapshot.storage.k8s.io"],
        "resources": ["volumesnapshots"],
        "verbs": ["create", "get", "list", "delete"],
    },
]


def render(v: Values) -> list[dict[str, Any]]:
    """The objects, in an order `kubectl apply` can take in one pass."""
    v.check()
    shared_volume = not (v.trajectories and v.snapshot_store)
    objects = _namespaces(v) + _access(v)
    objects += [
        _policy("default-deny", v.sandbox_namespace, {}, [], []),
        _policy("default-deny", v.namespace, {}, [], []),
        *_service_policies(v),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("pomona-orchestrator", v.namespace, "orchestrator"),
            "data": _runtime_settings(v),
        },
    ]
    if shared_volume:
        objects.append(_shared_claim(v))
    if v.models:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta("pomona-proxy-models", v.namespace, "pomona-proxy"),
                "data": {"models.yaml": _yaml({"model_list": v.models})},
            }
        )
    objects += _redis(v) + _orchestrator(v, shared_volume) + _proxy(v, shared_volume)
    objects += _ingresses(v)
    return objects


def _namespaces(v: Values) -> list[dict[str, Any]]:
    """Pomona's own namespace (restricted) and the sandboxes' (baseline when root is allowed:
    root sandboxes keep a few capabilities)."""
    level = "baseline" if v.allow_root else "restricted"
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {PART_OF: "pomona", "pod-security.kubernetes.io/enforce": enforce},
            },
        }
        for name, enforce in ((v.namespace, "restricted"), (v.sandbox_namespace, level))
    ]


def _access(v: Values) -> list[dict[str, Any]]:
    """The orchestrator's service account and what it may do in the sandboxes' namespace."""
    ns, sbx = v.namespace, v.sandbox_namespace
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta("pomona-orchestrator", ns, "orchestrator"),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta("pomona-sandboxes", sbx, "rbac"),
            "rules": SANDBOX_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta("pomona-sandboxes", sbx, "rbac"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pomona-sandboxes",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "pomona-orchestrator", "namespace": ns}
            ],
        },
    ]


def _shared_claim(v: Values) -> dict[str, Any]:
    """The volume the orchestrator and the proxy share when trajectories or snapshots have no
    object store of their own."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": v.shared_storage}},
    }
    if v.shared_storage_class:
        spec["storageClassName"] = v.shared_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta("pomona-shared", v.namespace, "storage"),
        "spec": spec,
    }


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


TCP = "TCP"


def _ports(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": TCP, "port": p} for p in ports]


def _peer(spec: dict[str, Any]) -> dict[str, Any]:
    """A NetworkPolicy peer from a value: pods by namespace (and labels), or an address block."""
    if "cidr" in spec:
        return {"ipBlock": {"cidr": spec["cidr"]}}
    peer = _from(spec["namespace"])
    if spec.get("labels"):
        peer["podSelector"] = {"matchLabels": spec["labels"]}
    return peer


def _egress_to(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"to": [_peer(s)], "ports": _ports(int(s["port"]))} for s in specs]


def _service_policies(v: Values) -> list[dict[str, Any]]:
    """What may reach the orchestrator, the proxy and Redis, and what they may reach: the
    orchestrator only DNS, Redis, the API server (`api_server_cidrs`) and the object store; the
    proxy the model APIs on 443, the in-cluster model servers and the object store; callers are
    the sandbox namespace, the trainers' namespaces, the ingress controller and Prometheus."""
    ns, sbx = v.namespace, v.sandbox_namespace
    store = [v.object_store] if v.object_store else []
    callers = [_from(t) for t in v.trainer_namespaces]
    if v.proxy_host or v.api_host:
        callers.append(_from(v.ingress_namespace))
    scrape = [_from(v.prometheus_namespace)] if v.prometheus_namespace else []
    api = {"ports": _ports(443, 6443)}
    if v.api_server_cidrs:
        api["to"] = [{"ipBlock": {"cidr": c}} for c in v.api_server_cidrs]
    redis = {
        "to": [{"podSelector": {"matchLabels": {APP_LABEL: "pomona-redis"}}}],
        "ports": _ports(6379),
    }
    return [
        _policy(
            "pomona-orchestrator", ns, {APP_LABEL: "pomona-orchestrator"},
            [{"ports": _ports(8000)}],  # API clients, wherever they are (an API key each)
            [DNS, redis, api, *_egress_to(store)],
        ),
        _policy(
            "pomona-proxy", ns, {APP_LABEL: "pomona-proxy"},
            [{"from": [_from(sbx), _from(ns, "pomona-orchestrator"), *callers, *scrape],
              "ports": _ports(4000)}],
            [DNS, {"ports": _ports(443)}, *_egress_to(v.model_servers), *_egress_to(store)],
        ),
        _policy(
            "pomona-redis", ns, {APP_LABEL: "pomona-redis"},
            [{"from": [{"podSelector": {"matchLabels": {APP_LABEL: "pomona-orchestrator"}}}],
              "ports": _ports(6379)}],
            [],
        ),
    ]  # fmt: skip


def _ingresses(v: Values) -> list[dict[str, Any]]:
    """One Ingress per host given: trainers and dashboards outside the cluster reach the proxy
    (open episodes, read calls) and the API through the cluster's ingress controller."""
    out = []
    for host, name, port in (
        (v.proxy_host, "pomona-proxy", 4000),
        (v.api_host, "pomona-orchestrator", 8000),
    ):
        if not host:
            continue
        spec: dict[str, Any] = {
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": name, "port": {"number": port}}}}]}}],
        }  # fmt: skip
        if v.ingress_class:
            spec["ingressClassName"] = v.ingress_class
        if v.ingress_tls_secret:
            spec["tls"] = [{"hosts": [host], "secretName": v.ingress_tls_secret}]
        out.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                    "metadata": _meta(name, v.namespace, name), "spec": spec})  # fmt: skip
    return out


def _s3_env(v: Values) -> list[dict[str, Any]]:
    """Object store credentials from their Secret, where a store URI is s3:// (pyarrow's S3
    filesystem reads the usual AWS_* variables)."""
    if not v.s3():
        return []
    return [
        _secret_env("AWS_ACCESS_KEY_ID", v.s3_secret, "AWS_ACCESS_KEY_ID"),
        _secret_env("AWS_SECRET_ACCESS_KEY", v.s3_secret, "AWS_SECRET_ACCESS_KEY"),
        _secret_env("AWS_SESSION_TOKEN", v.s3_secret, "AWS_SESSION_TOKEN", optional=True),
    ]


def _scraped(deployment: dict[str, Any], port: int) -> None:
    """Prometheus' annotations on the pods (/metrics; the orchestrator's needs an admin key)."""
    deployment["spec"]["template"]["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }


def _runtime_settings(v: Values) -> dict[str, str]:
    """The kubernetes runtime's settings (POMONA_K8S_*, read by settings_from_env)."""
    data = {
        "POMONA_K8S_NAMESPACE": v.sandbox_namespace,
        "POMONA_K8S_OWNER": "pomona",
        "POMONA_K8S_GATE_IMAGE": v.image,
        "POMONA_K8S_TOOLS_IMAGE": v.tools_image,
        "POMONA_K8S_PAYLOAD": v.payload,
        "POMONA_K8S_ALLOW_ROOT": json.dumps(v.allow_root),
        "POMONA_K8S_GATEWAY_SELECTOR": json.dumps({APP_LABEL: "pomona-proxy"}),
        "POMONA_K8S_SNAPSHOT_STORE": v.snapshot_store or "/shared/snapshots",
    }
    optional = {
        "POMONA_K8S_RUNTIME_CLASS": v.runtime_class,
        "POMONA_K8S_WORKSPACE_STORAGE_CLASS": v.workspace_storage_class,
        "POMONA_K8S_SNAPSHOT_CLASS": v.snapshot_class,
        "POMONA_K8S_NODE_SELECTOR": json.dumps(v.sandbox_node_selector)
        if v.sandbox_node_selector
        else None,
        "POMONA_K8S_WARM_POOLS": json.dumps(v.warm_pools) if v.warm_pools else None,
    }
    data.update({k: val for k, val in optional.items() if val})
    return data


def _shared(shared: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not shared:
        return [], []
    return (
        [{"name": "shared", "mountPath": "/shared"}],
        [{"name": "shared", "persistentVolumeClaim": {"claimName": "pomona-shared"}}],
    )


def _orchestrator(v: Values, shared: bool) -> list[dict[str, Any]]:
    name = "pomona-orchestrator"
    mounts, volumes = _shared(shared)
    env = [
        _secret_env("POMONA_API_KEYS", "pomona-api-keys", "POMONA_API_KEYS"),
        _secret_env("REDIS_PASSWORD", "pomona-redis", "password"),
        *(_s3_env(v) if v.snapshot_store and v.snapshot_store.startswith("s3://") else []),
    ]
    args = [
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--runtime",
        "kubernetes",
        "--state-dir",
        "/tmp/pomona",
        "--redis",
        "redis://:$(REDIS_PASSWORD)@pomona-redis:6379/0",
    ]
    deployment = _deployment(
        v,
        name,
        v.replicas,
        args,
        8000,
        "/health",
        env,
        v.orchestrator_cpu,
        v.orchestrator_memory,
        mounts,
        volumes,
        service_account=name,
    )
    deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": name}}
    ]
    if v.prometheus_namespace:
        _scraped(deployment, 8000)
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(name, v.namespace, name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": v.replicas,
            "maxReplicas": max(v.max_replicas, v.replicas),
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 70},
                    },
                }
            ],
        },
    }
    return [deployment, _service(v, name, 8000, v.service_type), _pdb(v, name), hpa]


def _proxy(v: Values, shared: bool) -> list[dict[str, Any]]:
    name = "pomona-proxy"
    mounts, volumes = _shared(shared)
    args = [
        "proxy",
        "--host",
        "0.0.0.0",
        "--port",
        "4000",
        "--trajectories",
        v.trajectories or "/shared/trajectories",
        "--public-url",
        f"http://{name}.{v.namespace}.svc:4000",
    ]
    env = [
        *(_secret_env(k, "pomona-model-keys", k, optional=True) for k in v.key_names()),
        _secret_env("POMONA_PROXY_API_KEYS", "pomona-proxy-keys", "POMONA_PROXY_API_KEYS", True),
        *(_s3_env(v) if v.trajectories and v.trajectories.startswith("s3://") else []),
        {"name": "POMONA_TRAJECTORY_SPOOL", "value": "/spool"},
    ]
    mounts = [*mounts, {"name": "spool", "mountPath": "/spool"}]
    volumes = [*volumes, {"name": "spool", "emptyDir": {}}]
    if v.models:
        args += ["--config", "/etc/pomona/models.yaml"]
        mounts.append({"name": "models", "mountPath": "/etc/pomona", "readOnly": True})
        volumes.append({"name": "models", "configMap": {"name": "pomona-proxy-models"}})
    deployment = _deployment(
        v,
        name,
        v.proxy_replicas,
        args,
        4000,
        "/healthz",
        env,
        v.proxy_cpu,
        v.proxy_memory,
        mounts,
        volumes,
        service_account=None,
    )
    if v.prometheus_namespace:
        _scraped(deployment, 4000)
    return [deployment, _service(v, name, 4000), _pdb(v, name)]


def _redis(v: Values) -> list[dict[str, Any]]:
    name = "pomona-redis"
    claim: dict[str, Any] = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": v.redis_storage}},
        },
    }
    if v.storage_class:
        claim["spec"]["storageClassName"] = v.storage_class
    container = {
        "name": "redis",
        "image": v.redis_image,
        "args": [
            "redis-server",
            "--requirepass",
            "$(REDIS_PASSWORD)",
            "--maxmemory-policy",
            "noeviction",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--dir",
            "/data",
            "--protected-mode",
            "yes",
        ],
        "env": [_secret_env("REDIS_PASSWORD", "pomona-redis", "password")],
        "ports": [{"name": "redis", "containerPort": 6379}],
        "readinessProbe": {
            "exec": {
                "command": ["sh", "-c", 'redis-cli -a "$REDIS_PASSWORD" --no-auth-warning ping']
            },
            "periodSeconds": 5,
        },
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": _restricted(999),
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, v.namespace, "store"),
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": {APP_LABEL: name}},
            "template": {
                "metadata": {"labels": _meta(name, None, "store")["labels"]},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "fsGroup": 999,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                },
            },
            "volumeClaimTemplates": [claim],
        },
    }
    return [statefulset, _service(v, name, 6379)]


def to_yaml(objects: list[dict[str, Any]]) -> str:
    import yaml

    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects)


def add_deploy_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`pomona deploy render`; its parser sets `func`, as cli.py expects."""
    p = subparsers.add_parser("deploy", help="Kubernetes manifests for a Pomona deployment")
    sub = p.add_subparsers(dest="deploy_command", required=True)
    r = sub.add_parser("render", help="print every object as YAML (kubectl apply -f -)")
    r.add_argument("--values", type=Path, help="YAML of values (see pomona.deploy.Values)")
    for f in fields(Values):
        if f.type in ("str", "str | None", "int"):
            r.add_argument(
                "--" + f.name.replace("_", "-"), dest=f.name, type=int if f.type == "int" else str
            )
    r.add_argument(
        "--print-values", action="store_true", help="print the values in effect and stop"
    )
    r.set_defaults(func=render_command)
    return p


def render_command(args: argparse.Namespace) -> int:
    overrides = {f.name: getattr(args, f.name, None) for f in fields(Values)}
    values = Values.load(args.values, overrides)
    if args.print_values:
        import yaml

        sys.stdout.write(yaml.safe_dump(asdict(values), sort_keys=False))
        return 0
    sys.stdout.write(to_yaml(render(values)))
    return 0
