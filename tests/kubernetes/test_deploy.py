"""`pomona deploy render`: every object schema-valid, the RBAC confined to the sandbox
namespace, Redis durable and authenticated, secrets referenced and never rendered, and the
checked-in deploy/pomona.yaml the same as what the command prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pomona.deploy import Values, render, to_yaml
from tests.kubernetes.schema import validate

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "defaults": Values(),
    "hardened": Values(
        allow_root=False,
        runtime_class="gvisor",
        payload="image-volume",
        workspace_storage_class="fast",
        snapshot_class="csi",
        service_type="LoadBalancer",
        sandbox_node_selector={"pool": "sandboxes"},
        warm_pools={"python:3.12": 4},
    ),
    "rl": Values(
        trajectories="s3://runs/pomona?endpoint_override=minio.storage.svc:9000&scheme=http",
        snapshot_store="s3://runs/snapshots?endpoint_override=minio.storage.svc:9000&scheme=http",
        models=[
            {
                "model_name": "policy",
                "litellm_params": {
                    "model": "hosted_vllm/qwen",
                    "api_base": "http://vllm.serving.svc:8000/v1",
                    "api_key": "os.environ/VLLM_KEY",
                },
                "model_info": {"pomona": {"token_ids": True}},
            },
            {"model_name": "judge", "litellm_params": {"model": "openai/gpt-4o-mini"}},
        ],
        model_servers=[
            {"namespace": "serving", "labels": {"app": "vllm"}, "port": 8000},
            {"namespace": "serving", "labels": {"app": "sglang"}, "port": 30000},
        ],
        object_store={"namespace": "storage", "labels": {"app": "minio"}, "port": 9000},
        trainer_namespaces=["training"],
        prometheus_namespace="monitoring",
        proxy_host="proxy.rl.example.com",
        api_host="api.rl.example.com",
        ingress_class="nginx",
        ingress_tls_secret="rl-tls",
        api_server_cidrs=["10.0.0.1/32", "10.0.0.2/32"],
    ),  # fmt: skip
    "object-store": Values(
        trajectories="s3://runs/pomona",
        snapshot_store="s3://runs/snapshots",
        namespace="ml",
        sandbox_namespace="ml-sbx",
        replicas=5,
        max_replicas=20,
    ),
}


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rendered_object_is_schema_valid(variant):
    objects = render(VARIANTS[variant])
    for obj in objects:
        validate(obj)
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("variant", VARIANTS)
def test_rbac_grants_nothing_outside_the_sandbox_namespace(variant):
    values = VARIANTS[variant]
    objects = render(values)
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    (role,) = by_kind(objects, "Role")
    (binding,) = by_kind(objects, "RoleBinding")
    assert (
        role["metadata"]["namespace"]
        == binding["metadata"]["namespace"]
        == values.sandbox_namespace
    )
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pomona-orchestrator", "namespace": values.namespace}
    ]
    allowed = {
        "pods",
        "pods/exec",
        "pods/portforward",
        "pods/log",
        "networkpolicies",
        "volumesnapshots",
    }
    for rule in role["rules"]:
        assert (
            "*" not in rule["verbs"]
            and "*" not in rule["resources"]
            and "*" not in rule["apiGroups"]
        )
        assert set(rule["resources"]) <= allowed
        assert not {"escalate", "bind", "impersonate", "update"} & set(rule["verbs"])
        assert "patch" not in rule["verbs"] or rule["resources"] == ["pods"]  # relabel a pool pod
    # the only pods that get a service-account token are the orchestrator's
    for workload in by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet"):
        spec = workload["spec"]["template"]["spec"]
        token = spec.get("automountServiceAccountToken")
        assert token is (workload["metadata"]["name"] == "pomona-orchestrator")


def test_sandbox_namespace_is_default_deny_and_the_proxy_admits_it():
    values = Values()
    policies = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p
        for p in by_kind(render(values), "NetworkPolicy")
    }
    deny = policies[(values.sandbox_namespace, "default-deny")]["spec"]
    assert deny == {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [],
        "egress": [],
    }
    assert policies[(values.namespace, "default-deny")]["spec"]["ingress"] == []
    proxy = policies[(values.namespace, "pomona-proxy")]["spec"]
    sources = proxy["ingress"][0]["from"]
    assert {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": values.sandbox_namespace}
        }
    } in sources
    redis = policies[(values.namespace, "pomona-redis")]["spec"]
    assert redis["egress"] == [] and redis["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "pomona-orchestrator"}}}
    ]


def test_redis_is_authenticated_durable_and_never_evicts():
    objects = render(Values(storage_class="ssd"))
    (redis,) = by_kind(objects, "StatefulSet")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    pairs = dict(zip(args[1::2], args[2::2], strict=False))
    assert pairs["--maxmemory-policy"] == "noeviction" and pairs["--appendonly"] == "yes"
    assert pairs["--requirepass"] == "$(REDIS_PASSWORD)"
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "ssd"


def test_secrets_are_referenced_never_rendered():
    objects = render(Values())
    assert by_kind(objects, "Secret") == []
    text = to_yaml(objects)
    assert "secretKeyRef" in text and "pomona-api-keys" in text
    orchestrator = next(
        o for o in by_kind(objects, "Deployment") if o["metadata"]["name"] == "pomona-orchestrator"
    )
    container = orchestrator["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"][0]["configMapRef"] == {"name": "pomona-orchestrator"}
    assert container["args"][container["args"].index("--runtime") + 1] == "kubernetes"


def test_probes_ask_each_server_its_own_health_route(tmp_path):
    from fastapi.testclient import TestClient

    from pomona.orchestrator.server.app import build
    from pomona.proxy import ProxyConfig
    from pomona.proxy.app import create_app

    apps = {
        "pomona-orchestrator": build("local", str(tmp_path)),
        "pomona-proxy": create_app(ProxyConfig()),
    }
    for deployment in by_kind(render(Values()), "Deployment"):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        client = TestClient(apps[deployment["metadata"]["name"]])
        for probe in ("readinessProbe", "livenessProbe"):
            assert client.get(container[probe]["httpGet"]["path"]).status_code == 200


def test_availability_objects():
    values = Values(replicas=4, max_replicas=12)
    objects = render(values)
    (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (4, 12)
    assert {p["metadata"]["name"] for p in by_kind(objects, "PodDisruptionBudget")} == {
        "pomona-orchestrator",
        "pomona-proxy",
    }


def test_runtime_settings_reach_the_runtime():
    from pomona.orchestrator.runtimes.kubernetes.objects import KubernetesSettings
    from pomona.orchestrator.runtimes.kubernetes.runtime import settings_from_env

    values = VARIANTS["hardened"]
    (config,) = by_kind(render(values), "ConfigMap")
    settings = KubernetesSettings(**settings_from_env(config["data"]))
    assert (settings.namespace, settings.runtime_class, settings.allow_root, settings.payload) == (
        values.sandbox_namespace,
        "gvisor",
        False,
        "image-volume",
    )
    assert settings.node_selector == {"pool": "sandboxes"}
    assert settings.warm_pools == {"python:3.12": 4}


def test_the_command_line_and_the_checked_in_manifest_agree(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("replicas: 2\nruntime_class: kata\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pomona.cli",
            "deploy",
            "render",
            "--values",
            str(values),
            "--namespace",
            "team",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = list(yaml.safe_load_all(out))
    assert docs[0]["metadata"]["name"] == "team"
    assert by_kind(docs, "Deployment")[0]["spec"]["replicas"] == 2
    values.write_text("replicaz: 2\n")
    typo = subprocess.run(
        [sys.executable, "-m", "pomona.cli", "deploy", "render", "--values", str(values)],
        capture_output=True,
        text=True,
    )
    assert typo.returncode != 0 and "unknown values: replicaz" in typo.stderr
    assert (ROOT / "deploy" / "pomona.yaml").read_text() == to_yaml(render(Values())), (
        "deploy/pomona.yaml is stale: pomona deploy render > deploy/pomona.yaml"
    )


def _policy_of(objects: list[dict], name: str) -> dict:
    return next(o for o in by_kind(objects, "NetworkPolicy") if o["metadata"]["name"] == name)[
        "spec"
    ]


def _env_of(objects: list[dict], name: str) -> dict[str, dict]:
    deployment = next(o for o in by_kind(objects, "Deployment") if o["metadata"]["name"] == name)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]} | {
        "__container": container,
        "__pod": deployment,
    }


def test_the_rl_deployment_as_rendered(tmp_path, monkeypatch):
    """The proxy's model list and keys as values, egress to the in-cluster model servers and the
    object store, S3 credentials wired, ingress for trainers and Prometheus, and the
    orchestrator's egress limited to the API server."""
    from pomona.proxy.config import ProxyConfig

    v = VARIANTS["rl"]
    objects = render(v)
    models = next(
        o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"] == "pomona-proxy-models"
    )
    (tmp_path / "models.yaml").write_text(models["data"]["models.yaml"])
    monkeypatch.setenv("VLLM_KEY", "k-123")
    config = ProxyConfig.from_yaml(tmp_path / "models.yaml")  # the proxy's own loader reads it
    assert [m.name for m in config.models] == ["policy", "judge"]
    assert config.route("policy").params["api_key"] == "k-123"
    proxy = _env_of(objects, "pomona-proxy")
    assert proxy["VLLM_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "pomona-model-keys",
        "key": "VLLM_KEY",
        "optional": True,
    }
    assert {
        "OPENAI_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "POMONA_PROXY_API_KEYS",
    } <= set(proxy)
    assert proxy["__container"]["args"][-2:] == ["--config", "/etc/pomona/models.yaml"]
    orchestrator = _env_of(objects, "pomona-orchestrator")
    assert orchestrator["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "pomona-s3"
    for env in (proxy, orchestrator):
        annotations = env["__pod"]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"

    serving = {"kubernetes.io/metadata.name": "serving"}
    storage = {"kubernetes.io/metadata.name": "storage"}
    egress = _policy_of(objects, "pomona-proxy")["egress"]
    peers = [
        (
            r["to"][0].get("namespaceSelector", {}).get("matchLabels"),
            r["to"][0].get("podSelector", {}).get("matchLabels"),
            r["ports"][0]["port"],
        )
        for r in egress
        if r.get("to") and "namespaceSelector" in r["to"][0]
    ]
    assert (serving, {"app": "vllm"}, 8000) in peers and (
        serving,
        {"app": "sglang"},
        30000,
    ) in peers
    assert (storage, {"app": "minio"}, 9000) in peers
    callers = [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for p in _policy_of(objects, "pomona-proxy")["ingress"][0]["from"]
    ]
    assert {
        "training",
        "monitoring",
        "ingress-nginx",
        "ml-sbx" if False else v.sandbox_namespace,
    } <= set(callers)

    orch = _policy_of(objects, "pomona-orchestrator")["egress"]
    blocks = [p["ipBlock"]["cidr"] for r in orch for p in r.get("to", []) if "ipBlock" in p]
    assert blocks == ["10.0.0.1/32", "10.0.0.2/32"]  # the API server, and no other address
    assert all(r.get("to") for r in orch), "an egress rule without peers allows every address"

    ingresses = {i["spec"]["rules"][0]["host"]: i["spec"] for i in by_kind(objects, "Ingress")}
    assert ingresses["proxy.rl.example.com"]["rules"][0]["http"]["paths"][0]["backend"][
        "service"
    ] == {"name": "pomona-proxy", "port": {"number": 4000}}
    assert ingresses["api.rl.example.com"]["tls"] == [
        {"hosts": ["api.rl.example.com"], "secretName": "rl-tls"}
    ]
    assert "k-123" not in to_yaml(objects)


def test_rl_values_that_would_leak_or_not_work_are_refused(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(
        "models:\n- model_name: m\n  litellm_params: {model: openai/x, api_key: sk-live}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pomona.cli", "deploy", "render", "--values", str(values)],
        capture_output=True,
        text=True,
    )
    assert (
        done.returncode != 0 and "os.environ/NAME" in done.stderr and "sk-live" not in done.stdout
    )
    values.write_text("model_servers:\n- {namespace: serving}\n")
    done = subprocess.run(
        [sys.executable, "-m", "pomona.cli", "deploy", "render", "--values", str(values)],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "give a port" in done.stderr
