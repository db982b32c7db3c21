"""The Pod, NetworkPolicy and VolumeSnapshot the runtime creates, for each option, validated
against the Kubernetes OpenAPI schemas, and checked for what the schemas cannot say: the
hardening, who may talk to whom, and that the runtime refuses what a cluster cannot do."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from pomona.errors import InvalidRequest, RuntimeUnavailable
from pomona.orchestrator.runtimes.kubernetes import gate, objects
from pomona.orchestrator.runtimes.kubernetes.objects import KubernetesSettings
from pomona.orchestrator.types import Limits, Mount, SandboxSpec
from tests.kubernetes.schema import validate

PROXY = "pomona-proxy.pomona.svc.cluster.local"
TOOLS = Mount(source="/var/cache/pomona/tools", target=objects.TOOLS_TARGET)


def build(spec: SandboxSpec, sandbox_id: str = "sb-1", **settings) -> tuple[dict, dict]:
    s = KubernetesSettings(tools_image="pomona/tools:1", **settings)
    route = objects.gateway_route(PROXY, "10.96.0.10", 4000, s) if spec.gateway else None
    pod = objects.sandbox_pod(sandbox_id, spec, s, "owner-1", 1700000000.0, route)
    policy = objects.network_policy(sandbox_id, spec, s, "owner-1", route)
    validate(pod)
    validate(policy)
    return pod, policy


SPECS = {
    "defaults": SandboxSpec(image="debian:bookworm"),
    "gateway": SandboxSpec(image="debian:bookworm", network="gateway", gateway=f"{PROXY}:4000"),
    "full": SandboxSpec(image="debian:bookworm", network="full"),
    "limits": SandboxSpec(
        image="debian:bookworm", limits={"cpu": 0.5, "memory": "1Gi", "disk": "2Gi"}
    ),
    "payload": SandboxSpec(image="debian:bookworm", mounts=[TOOLS]),
    "root-user-env-labels": SandboxSpec(
        image="python:3.12",
        user="root",
        env={"A": "1"},
        labels={"run": "r1", "task": "t/1", "bad key!": "x"},
    ),
}
OPTIONS = {
    "default": {},
    "gvisor": {"runtime_class": "gvisor"},
    "image-volume": {"payload": "image-volume"},
    "non-root": {"allow_root": False},
    "workspace-volume": {"workspace_storage_class": "fast", "snapshot_class": "csi"},
    "scheduling": {
        "node_selector": {"workload": "sandbox"},
        "image_pull_secrets": ["regcred"],
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("kind", SPECS)
def test_every_object_is_schema_valid_and_hardened(kind, option):
    pod, policy = build(SPECS[kind], **OPTIONS[option])
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert (
        spec["activeDeadlineSeconds"] == 7 * 24 * 3600
    )  # a leak outlives no orchestrator for ever
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(k in spec for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["hostUsers"] is False  # root in the pod is an unprivileged id on the node
    assert all("hostPath" not in v for v in spec["volumes"])
    for container in spec["containers"] + spec["initContainers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert ctx["procMount"] == "Default"  # the runtime's masked /proc paths
        if container["name"] != "sandbox":
            assert ctx["runAsNonRoot"] and ctx["readOnlyRootFilesystem"]
            assert "add" not in ctx["capabilities"]
    sandbox = spec["containers"][0]
    if option == "non-root":
        assert (
            sandbox["securityContext"]["runAsNonRoot"]
            and sandbox["securityContext"]["runAsUser"] == 1000
        )
        assert "add" not in sandbox["securityContext"]["capabilities"]
    else:  # root may act on files and drop to the sandbox user; nothing more
        assert set(sandbox["securityContext"]["capabilities"]["add"]) <= {
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "SETUID",
            "SETGID",
        }
    assert sandbox["command"][:3] == [gate.BUSYBOX, "sh", "-c"]
    assert policy["spec"]["ingress"] == [] and set(policy["spec"]["policyTypes"]) == {
        "Ingress",
        "Egress",
    }
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_runtime_class_and_payload_delivery():
    pod, _ = build(SPECS["payload"], runtime_class="kata")
    assert pod["spec"]["runtimeClassName"] == "kata"
    init = {c["name"]: c for c in pod["spec"]["initContainers"]}
    assert init["pomona-tools"]["image"] == "pomona/tools:1"
    mount = next(
        m
        for m in pod["spec"]["containers"][0]["volumeMounts"]
        if m["mountPath"] == objects.TOOLS_TARGET
    )
    assert mount["readOnly"] is True
    pod, _ = build(SPECS["payload"], payload="image-volume")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "pomona-tools")
    assert volume["image"]["reference"] == "pomona/tools:1"
    assert "pomona-tools" not in {c["name"] for c in pod["spec"]["initContainers"]}
    mount = next(
        m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "pomona-tools"
    )
    assert mount["subPath"] == "pomona/tools" and mount["readOnly"] is True
    assert pod["spec"]["initContainers"][0]["name"] == "pomona-gate"  # the gate comes first, always
    # only an operator whose nodes have no user namespaces shares the node's
    assert build(SPECS["defaults"], host_users=True)[0]["spec"]["hostUsers"] is True


def test_limits_become_requests_and_limits():
    pod, _ = build(SPECS["limits"])
    resources = pod["spec"]["containers"][0]["resources"]
    expected = {"cpu": "500m", "memory": str(2**30), "ephemeral-storage": str(2 * 2**30)}
    assert resources["limits"] == expected and resources["requests"] == expected
    pod, _ = build(SPECS["defaults"])
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"}
    }
    # the service's default limits cap every pod but reserve only the small requests
    defaults = Limits(cpu=2, memory=4 * 2**30)
    spec = SandboxSpec(image="debian:bookworm", limits=defaults)
    s = KubernetesSettings()
    assert objects.resources(spec, s, defaults) == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "2000m", "memory": str(4 * 2**30)},
    }
    tiny = Limits(cpu=0.05, memory=2**26)  # defaults under the small requests: requests = limits
    spec = SandboxSpec(image="debian:bookworm", limits=tiny)
    assert objects.resources(spec, s, tiny)["requests"] == {"cpu": "50m", "memory": str(2**26)}
    asked = SandboxSpec(image="debian:bookworm", limits={"cpu": 1, "memory": "4Gi"})
    assert objects.resources(asked, s, defaults)["requests"] == {
        "cpu": "1000m",
        "memory": "128Mi",
    }
    pod, _ = build(SPECS["limits"], workspace_storage_class="fast")
    claim = next(v for v in pod["spec"]["volumes"] if v["name"] == "workspace")["ephemeral"]
    assert claim["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"] == str(
        2 * 2**30
    )


def test_network_modes():
    _, none = build(SPECS["defaults"])
    assert none["spec"]["egress"] == []
    pod, gw = build(SPECS["gateway"])
    (rule,) = gw["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 4000}]
    assert {"ipBlock": {"cidr": "10.96.0.10/32"}} in rule["to"]
    service_peer = next(p for p in rule["to"] if "podSelector" in p)
    assert service_peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "pomona"
    }
    forwarder = next(c for c in pod["spec"]["containers"] if c["name"] == "pomona-gateway")
    assert forwarder["command"][-2:] == ["10.96.0.10", "4000"]  # an IP: the pod needs no DNS
    assert forwarder["command"][forwarder["command"].index("-p") + 1] == "4000"
    _, full = build(SPECS["full"])
    internet, dns = full["spec"]["egress"]
    v4 = internet["to"][0]["ipBlock"]
    assert v4["cidr"] == "0.0.0.0/0" and {"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12"} <= set(
        v4["except"]
    )
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def test_an_ip_gateway_is_one_address_only():
    s = KubernetesSettings()
    route = objects.gateway_route("192.0.2.7", "192.0.2.7", 8080, s)
    assert route.peers == ({"ipBlock": {"cidr": "192.0.2.7/32"}},)


def test_names_and_labels_from_any_id():
    ids = ["a_b", "a.b", "a-b", "x" * 63, "9._-", "run.1_task-2"]
    names = {objects.pod_name(i) for i in ids}
    assert len(names) == len(ids)  # distinct ids never share a pod
    for sandbox_id in ids:
        build(SPECS["defaults"], sandbox_id)  # validate() checks name and labels
    pod, _ = build(SPECS["root-user-env-labels"])
    labels = pod["metadata"]["labels"]
    assert labels["label.pomona.dev/run"] == "r1"
    assert not any(
        "bad key" in k or k.endswith("/task") for k in labels
    )  # kept in the spec annotation only
    assert objects.spec_of(pod) == SPECS["root-user-env-labels"]


def test_fork_restores_the_workspace_from_a_volume_snapshot():
    s = KubernetesSettings(workspace_storage_class="fast", snapshot_class="csi-snapclass")
    snap = objects.volume_snapshot(
        "snap-1", objects.pod_name("sb-1"), "owner-1", s, json.dumps({"id": "snap-1"})
    )
    validate(snap)
    assert (
        snap["spec"]["source"]["persistentVolumeClaimName"]
        == objects.pod_name("sb-1") + "-workspace"
    )
    pod = objects.sandbox_pod(
        "sb-2",
        SPECS["defaults"],
        s,
        "owner-1",
        1.0,
        origin="snap-1",
        workspace_snapshot=snap["metadata"]["name"],
    )
    validate(pod)
    claim = next(v for v in pod["spec"]["volumes"] if v["name"] == "workspace")
    source = claim["ephemeral"]["volumeClaimTemplate"]["spec"]["dataSource"]
    assert source == {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": snap["metadata"]["name"],
    }
    assert pod["metadata"]["labels"][objects.ORIGIN_LABEL] == objects.id_hash("snap-1")


def test_the_validator_is_not_vacuous():
    pod, _ = build(SPECS["defaults"])
    for breakage in (
        lambda p: p["spec"]["containers"][0].update(imagePullPolicy=7),
        lambda p: p["spec"].update(notAField=True),
        lambda p: p["metadata"].update(name="Not_A_Name"),
    ):
        broken = copy.deepcopy(pod)
        breakage(broken)
        with pytest.raises(AssertionError):
            validate(broken)


def test_host_paths_are_refused():
    with pytest.raises(InvalidRequest, match="host paths"):
        build(SandboxSpec(image="debian", mounts=[Mount(source="/etc", target="/mnt/etc")]))
    with pytest.raises(InvalidRequest, match="tools_image"):
        objects.sandbox_pod("sb", SPECS["payload"], KubernetesSettings(), "o", 1.0)


@pytest.fixture
def offline_runtime():
    """A runtime whose API server address is a closed local port: what it refuses, it refuses
    before calling the cluster; what it calls fails as unreachable."""
    from kubernetes import client

    from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

    configuration = client.Configuration(host="http://127.0.0.1:9")
    configuration.retries = 0
    runtime = KubernetesRuntime(api=client.ApiClient(configuration), owner="t", pod_pids_limit=4096)
    yield runtime
    asyncio.run(runtime.close())


@pytest.mark.parametrize(
    "spec, match",
    [
        (SandboxSpec(image="host"), "image='host'"),
        (SandboxSpec(image="oci-archive:/tmp/x.tar"), "archive"),
        (SandboxSpec(image="debian", limits={"pids": 64}), "podPidsLimit"),
        (SandboxSpec(image="debian", limits={"disk": "1Gi"}), "workspace_storage_class"),
        (SandboxSpec(image="debian", network="gateway", gateway="127.0.0.1:4000"), "loopback"),
        (
            SandboxSpec(image="debian", network="gateway", gateway="no-such-host.invalid:4000"),
            "resolve",
        ),
    ],
)
def test_refused_before_touching_the_cluster(offline_runtime, spec, match):
    with pytest.raises(InvalidRequest, match=match):
        asyncio.run(offline_runtime.create("sb-1", spec))


def test_image_sources_are_the_operators_allow_list():
    """`pomona serve --registry` restricts where images come from; the kubelet pulls a bare
    name from docker.io, so that is the registry checked for it."""
    from kubernetes import client

    from pomona.errors import ImageNotFound, SourceNotAllowed
    from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
    from pomona.orchestrator.sources import ImageSources

    configuration = client.Configuration(host="http://127.0.0.1:9")
    runtime = KubernetesRuntime(
        api=client.ApiClient(configuration),
        owner="t",
        sources=ImageSources.restricted(registries=["registry.internal:5000"]),
    )
    with pytest.raises(ImageNotFound, match="docker.io are not allowed"):
        asyncio.run(runtime.create("sb-1", SandboxSpec(image="debian:12")))
    with pytest.raises(SourceNotAllowed):
        asyncio.run(runtime.create("sb-1", SandboxSpec(image="ghcr.io/x/y:1")))
    with pytest.raises(InvalidRequest, match="not an image reference"):
        asyncio.run(runtime.create("sb-1", SandboxSpec(image="../../etc/passwd")))


def test_unreachable_api_server_is_runtime_unavailable(offline_runtime):
    with pytest.raises(RuntimeUnavailable, match="unreachable"):
        asyncio.run(offline_runtime.start())


def test_no_cluster_configured_says_how_to_get_one(tmp_path, monkeypatch):
    from pomona.orchestrator.runtimes import make_runtime

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(RuntimeUnavailable, match="KUBECONFIG"):
        make_runtime("kubernetes", str(tmp_path))


def test_settings_from_the_environment():
    from pomona.orchestrator.runtimes.kubernetes.runtime import settings_from_env

    found = settings_from_env(
        {
            "POMONA_K8S_NAMESPACE": "sbx",
            "POMONA_K8S_ALLOW_ROOT": "false",
            "POMONA_K8S_NODE_SELECTOR": '{"pool": "sandboxes"}',
            "POMONA_K8S_POD_PIDS_LIMIT": "1024",
            "POMONA_K8S_ROOT_CAPABILITIES": '["SETUID", "SETGID"]',
        }
    )
    assert found == {
        "namespace": "sbx",
        "allow_root": False,
        "node_selector": {"pool": "sandboxes"},
        "pod_pids_limit": 1024,
        "root_capabilities": ("SETUID", "SETGID"),
    }
    assert KubernetesSettings(**found).namespace == "sbx"
